package dispatch_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg/pgtest"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gendurable/gendurable/internal/dispatch"
	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/webhook"
)

// After a small drain the Prometheus counters agree with the database's own counts.
func TestMetricsMatchTheDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, 30*time.Second)
	reg := prometheus.NewRegistry()
	h.eng.SetMetrics(engine.NewMetrics(reg, h.db))
	m := dispatch.NewMetrics(reg)
	rcv := newReceiver(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		switch {
		case string(req.Job.Input) == `"fail"`:
			answer(w, webhook.Response{Fail: &webhook.Fail{}})
		case req.Job.Step == 0:
			answer(w, webhook.Response{Next: &webhook.Next{}})
		default:
			answer(w, webhook.Response{Done: &webhook.Done{}})
		}
	})
	h.handler(t, "h", rcv.URL, 3)
	var jobs []engine.NewJob
	for i := range 30 {
		in := `"ok"`
		if i%5 == 0 {
			in = `"fail"`
		}
		jobs = append(jobs, engine.NewJob{Handler: "h", Input: []byte(in)})
	}
	h.insert(t, jobs...)
	key := "dup"
	h.insert(t, engine.NewJob{Handler: "h", Key: &key, Queue: "other"}, engine.NewJob{Handler: "h", Key: &key, Queue: "other"})
	d := dispatch.New(h.eng, dispatch.Config{PollMin: 10 * time.Millisecond, QueueRefresh: 50 * time.Millisecond}, nil, m)
	d.Start(ctx)
	waitAllDoneOrFailed(t, h.db, 31)
	d.Stop(ctx)

	steps, _ := h.db.QueryInt(ctx, `SELECT count(*) FROM steps`)
	done, _ := h.db.QueryInt(ctx, `SELECT count(*) FROM steps WHERE outcome = 'done'`)
	fails, _ := h.db.QueryInt(ctx, `SELECT count(*) FROM steps WHERE outcome = 'fail'`)
	if got := testutil.ToFloat64(m.Steps.WithLabelValues("default", "h", "next")) +
		testutil.ToFloat64(m.Steps.WithLabelValues("default", "h", "done")) +
		testutil.ToFloat64(m.Steps.WithLabelValues("default", "h", "fail")) +
		testutil.ToFloat64(m.Steps.WithLabelValues("other", "h", "next")) +
		testutil.ToFloat64(m.Steps.WithLabelValues("other", "h", "done")); got != float64(steps) {
		t.Fatalf("steps_total adds up to %v, the steps table holds %d", got, steps)
	}
	if got := testutil.ToFloat64(m.Steps.WithLabelValues("default", "h", "done")) +
		testutil.ToFloat64(m.Steps.WithLabelValues("other", "h", "done")); got != float64(done) {
		t.Fatalf("done steps: metric %v, table %d", got, done)
	}
	if got := testutil.ToFloat64(m.Steps.WithLabelValues("default", "h", "fail")); got != float64(fails) {
		t.Fatalf("failed steps: metric %v, table %d", got, fails)
	}
	jobsN, _ := h.db.QueryInt(ctx, `SELECT count(*) FROM jobs`)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var inserted, dedup, depth float64
	for _, f := range families {
		for _, mm := range f.GetMetric() {
			switch f.GetName() {
			case "gendurable_jobs_inserted_total":
				inserted += mm.GetCounter().GetValue()
			case "gendurable_jobs_deduplicated_total":
				dedup += mm.GetCounter().GetValue()
			case "gendurable_queue_jobs":
				depth += mm.GetGauge().GetValue()
			}
		}
	}
	if inserted != float64(jobsN) || dedup != 1 || depth != float64(jobsN) {
		t.Fatalf("inserted %v, deduplicated %v, queue depth %v; the jobs table holds %d", inserted, dedup, depth, jobsN)
	}
}

func waitAllDoneOrFailed(t *testing.T, db *pg.DB, total int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		n, _ := db.QueryInt(context.Background(), `SELECT count(*) FROM jobs WHERE status IN ('done', 'failed')`)
		if n == total {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d jobs finished", n, total)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// GC deletes finished jobs past their retention with their inbox, and their history is
// gone with them; live jobs, children of a live parent, and queues with a longer
// retention keep theirs.
func TestGCKeepsWhatIsStillNeeded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, 30*time.Second)
	h.handler(t, "h", "http://127.0.0.1:1/", 3)
	ids := map[string]int64{}
	for _, name := range []string{"done", "failed", "cancelled", "live", "parent", "child", "kept", "debounced"} {
		q := "default"
		if name == "kept" {
			q = "archive"
		}
		if name == "debounced" { // a debounced job with a concurrency key (on Citus its debounce key's holder row names it)
			got, err := h.db.JobInsertMany(ctx, []pg.JobInsert{{Handler: "h", Queue: q, ConcurrencyKey: ptr("tenant-1"),
				Debounce: &pg.Debounce{Key: "sync-1", Period: time.Hour}}})
			if err != nil {
				t.Fatal(err)
			}
			ids[name] = got[0].ID
			continue
		}
		if name == "child" { // a child of parent (on Citus it lives at its parent's placement)
			got, err := h.db.JobInsertMany(ctx, []pg.JobInsert{{Handler: "h", Queue: q, ParentID: ptr(ids["parent"])}})
			if err != nil {
				t.Fatal(err)
			}
			ids[name] = got[0].ID
			continue
		}
		ids[name] = h.insert(t, engine.NewJob{Handler: "h", Queue: q})[0].ID
	}
	if _, err := h.db.QueueUpsert(ctx, pg.QueueUpsert{Name: "archive", Retention: ptr(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	for name, status := range map[string]string{"done": "done", "failed": "failed", "cancelled": "cancelled", "child": "done", "kept": "done",
		"debounced": "done"} {
		if _, err := h.db.Exec(ctx, `UPDATE jobs SET status = $2, finished_at = now() - interval '10 seconds' WHERE id = $1`, ids[name], status); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.db.Exec(ctx, `UPDATE jobs SET status = 'awaiting', pending_children = 1, eligible_at = 'infinity' WHERE id = $1;`, ids["parent"]); err != nil {
		t.Fatal(err)
	}
	history, inbox := `INSERT INTO steps (job_id, step, attempt, outcome, started_at, finished_at) VALUES ($1, 0, 1, 'done', now(), now())`,
		`INSERT INTO signals (job_id, seq, name) VALUES ($1, 1, 's')`
	if pgtest.Citus() { // the rows at their job's placement; a history id (no default on Citus)
		history = `INSERT INTO steps (id, placement, job_id, step, attempt, outcome, started_at, finished_at)
			VALUES ($1::bigint, ($1::bigint % 1024)::int, $1::bigint, 0, 1, 'done', now(), now())`
		inbox = `INSERT INTO signals (placement, job_id, seq, name) VALUES (($1::bigint % 1024)::int, $1::bigint, 1, 's')`
	}
	for _, name := range []string{"done", "failed"} {
		if _, err := h.db.Exec(ctx, history, ids[name]); err != nil {
			t.Fatal(err)
		}
		if _, err := h.db.Exec(ctx, inbox, ids[name]); err != nil {
			t.Fatal(err)
		}
	}
	if pgtest.Citus() {
		if n, err := h.db.QueryInt(ctx, `SELECT count(*) FROM debounce_holders WHERE job_id = $1`, ids["debounced"]); err != nil || n != 1 {
			t.Fatalf("the debounced job away from its debounce key has %d holder rows (%v), want 1", n, err)
		}
	}
	gc := h.eng.NewGC(engine.GCConfig{Retention: time.Second})
	n, err := gc.Sweep(ctx)
	if err != nil || n != 4 {
		t.Fatalf("GC deleted %d (%v), want the 4 finished jobs past retention", n, err)
	}
	for name, want := range map[string]bool{"done": false, "failed": false, "cancelled": false, "live": true,
		"parent": true, "child": true, "kept": true, "debounced": false} {
		_, err := h.db.JobGet(ctx, ids[name])
		if exists := err == nil; exists != want {
			t.Errorf("%s: exists=%v after GC, want %v", name, exists, want)
		}
	}
	// Their history rows go with their partition (HistoryPartitions); meanwhile a deleted
	// job has no history.
	for _, name := range []string{"done", "failed"} {
		if steps, err := h.db.StepList(ctx, ids[name], 10); err != nil || len(steps) != 0 {
			t.Fatalf("%s: %d history rows of a deleted job read (%v)", name, len(steps), err)
		}
	}
	if n, _ := h.db.QueryInt(ctx, `SELECT count(*) FROM signals`); n != 0 {
		t.Fatalf("%d signals of deleted jobs left", n)
	}
	if pgtest.Citus() {
		if n, err := h.db.QueryInt(ctx, `SELECT count(*) FROM debounce_holders`); err != nil || n != 0 {
			t.Fatalf("%d holder rows of deleted debounced jobs left (%v)", n, err)
		}
	}
	// Once the parent finishes, its child goes too.
	if _, err := h.db.Exec(ctx, `UPDATE jobs SET status = 'done', finished_at = now() - interval '10 seconds' WHERE id = $1`, ids["parent"]); err != nil {
		t.Fatal(err)
	}
	if n, err := gc.Sweep(ctx); err != nil || n != 2 {
		t.Fatalf("second sweep deleted %d (%v), want parent and child", n, err)
	}
}
