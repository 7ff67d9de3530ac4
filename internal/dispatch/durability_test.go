package dispatch_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/dispatch"
	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
	"github.com/gendurable/gendurable/webhook"
)

// An outcome or heartbeat carrying a stale lease token changes nothing.
func TestStaleLeaseTokenChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, time.Minute)
	h.handler(t, "h", "http://127.0.0.1:1/", 3)
	job := h.insert(t, engine.NewJob{Handler: "h"})[0]
	steps, _, err := h.eng.Claim(ctx, "default", 10)
	if err != nil || len(steps) != 1 {
		t.Fatalf("claim: %v %v", steps, err)
	}
	st := steps[0]
	before, _ := h.db.JobGet(ctx, job.ID)

	const stale = "6f1c2f64-0000-4000-8000-000000000000"
	_, err = h.eng.ApplyOutcome(ctx, engine.StepOutcome{JobID: job.ID, Token: stale, Outcome: engine.Outcome{Kind: pg.KindDone, Label: "done"}})
	if !errors.Is(err, engine.ErrLeaseLost) {
		t.Fatalf("stale outcome: err = %v, want ErrLeaseLost", err)
	}
	if _, err := h.eng.Heartbeat(ctx, job.ID, stale); !errors.Is(err, engine.ErrLeaseLost) {
		t.Fatalf("stale heartbeat: err = %v, want ErrLeaseLost", err)
	}
	after, _ := h.db.JobGet(ctx, job.ID)
	if after.Status != "executing" || !after.UpdatedAt.Equal(before.UpdatedAt) || !after.LeaseExpiresAt.Equal(*before.LeaseExpiresAt) {
		t.Fatalf("stale token changed the job: %+v", after.Job)
	}
	if n, _ := h.db.QueryInt(ctx, `SELECT count(*) FROM steps`); n != 0 {
		t.Fatalf("stale outcome wrote %d history rows", n)
	}

	// The right token applies once; replaying it is then stale.
	if _, err := h.eng.ApplyOutcome(ctx, engine.StepOutcome{JobID: job.ID, Token: st.LeaseToken, Outcome: engine.Outcome{Kind: pg.KindDone, Label: "done"}}); err != nil {
		t.Fatal(err)
	}
	_, err = h.eng.ApplyOutcome(ctx, engine.StepOutcome{JobID: job.ID, Token: st.LeaseToken, Outcome: engine.Outcome{Kind: pg.KindFail, Label: "fail"}})
	if !errors.Is(err, engine.ErrLeaseLost) {
		t.Fatalf("replayed outcome: err = %v", err)
	}
	final, _ := h.db.JobGet(ctx, job.ID)
	if final.Status != "done" {
		t.Fatalf("status %s", final.Status)
	}
}

// A step whose process died (its lease expired) is taken back by the reaper and runs again.
func TestReaperReclaimsExpiredLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, 30*time.Second) // long enough that no lease expires under load
	rcv := doneReceiver(t)
	h.handler(t, "h", rcv.URL, 3)
	job := h.insert(t, engine.NewJob{Handler: "h"})[0]
	// A "process" claims the step and dies: nobody heartbeats or answers.
	if steps, _, err := h.eng.Claim(ctx, "default", 1); err != nil || len(steps) != 1 {
		t.Fatalf("claim: %v", err)
	}
	// The reaper's clock runs a minute ahead: the dead process's lease has expired for it.
	reaper := h.eng.NewReaper(engine.ReaperConfig{Now: func() time.Time { return time.Now().Add(time.Minute) }})
	if st, err := reaper.Sweep(ctx); err != nil || st.Reaped != 1 {
		t.Fatalf("sweep: %+v %v", st, err)
	}
	j, _ := h.db.JobGet(ctx, job.ID)
	if j.Status != "runnable" || j.Attempt != 1 {
		t.Fatalf("after reaping: status=%s attempt=%d", j.Status, j.Attempt)
	}
	startDispatcher(t, h.eng, dispatch.Config{})
	waitJob(t, h.db, job.ID, 10*time.Second, hasStatus("done"))
	assertHistory(t, h, job.ID, "lease_expired/-/1", "done/200/2")
}

// The reaper service runs its sweeps on its own and stops promptly.
func TestReaperServiceSweepsUntilStopped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, 30*time.Second)
	h.handler(t, "h", "http://127.0.0.1:9/", 3)
	h.insert(t, engine.NewJob{Handler: "h"})
	if steps, _, err := h.eng.Claim(ctx, "default", 1); err != nil || len(steps) != 1 {
		t.Fatalf("claim: %v", err)
	}
	reaper := h.eng.NewReaper(engine.ReaperConfig{Interval: 10 * time.Millisecond,
		Now: func() time.Time { return time.Now().Add(time.Minute) }})
	swept := make(chan engine.ReaperStats, 1000)
	reaper.OnSweep = func(s engine.ReaperStats, err error) {
		if err != nil && !errors.Is(err, context.Canceled) { // Stop cancels the sweep in progress
			t.Error(err)
		}
		swept <- s
	}
	reaper.Start(ctx)
	for reaped := 0; reaped == 0; {
		select {
		case s := <-swept:
			reaped = s.Reaped
		case <-time.After(30 * time.Second):
			t.Fatal("the reaper service never took the expired lease back")
		}
	}
	reaper.Stop() // returns once the sweep in progress has
}

// Two dispatchers (two engines, as in two server processes) drain 5 000 jobs: every job
// runs exactly once and every outcome is written exactly once.
func TestTwoDispatchersDrainWithoutDoubleOutcomes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	counter := &pg.StatementCounter{}
	db := pgtest.Open(t, url, pg.Options{Counter: counter, MaxConns: 20})
	engA, err := engine.New(db, engine.Config{LeaseTTL: 30 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{db: db, eng: engA, counter: counter}
	engB := h.secondEngine(t, url)

	var calls sync.Map // job id → *atomic.Int32
	rcv := newReceiver(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		n, _ := calls.LoadOrStore(req.Job.ID, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		answer(w, webhook.Response{Done: &webhook.Done{}})
	})
	h.handler(t, "h", rcv.URL, 3)
	const total = 5000
	jobs := make([]engine.NewJob, total)
	for i := range jobs {
		jobs[i] = engine.NewJob{Handler: "h"}
	}
	h.insert(t, jobs...)
	if _, err := db.QueueUpsert(ctx, pg.QueueUpsert{Name: "default", MaxInFlight: ptr(64), Batch: ptr(32)}); err != nil {
		t.Fatal(err)
	}
	counter.Reset()
	startDispatcher(t, engA, dispatch.Config{})
	startDispatcher(t, engB, dispatch.Config{})

	deadline := time.Now().Add(60 * time.Second)
	for {
		n, err := db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE status = 'done'`)
		if err != nil {
			t.Fatal(err)
		}
		if n == total {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d jobs done", n, total)
		}
		time.Sleep(20 * time.Millisecond)
	}
	executed := 0
	calls.Range(func(_, v any) bool {
		if c := v.(*atomic.Int32).Load(); c != 1 {
			t.Errorf("a job was executed %d times", c)
		}
		executed++
		return true
	})
	if executed != total {
		t.Fatalf("%d jobs executed, want %d", executed, total)
	}
	rows, err := db.QueryStrings(ctx, `SELECT count(*), count(DISTINCT job_id), count(*) FILTER (WHERE outcome = 'done') FROM steps`)
	if err != nil {
		t.Fatal(err)
	}
	if rows[0][0] != "5000" || rows[0][1] != "5000" || rows[0][2] != "5000" {
		t.Fatalf("history rows (total, distinct jobs, done) = %v, want one done row per job", rows[0])
	}
	// Batching: never more than one outcome statement per step.
	outcomes := h.counter.Count("JobApplyOutcomes") + h.counter.Count("JobApplyPlainOutcomes")
	if outcomes > total || outcomes == 0 {
		t.Fatalf("%d outcome statements for %d steps", outcomes, total)
	}
	t.Logf("5000 one-step jobs: %d outcome statements (dispatcher A's pool), %d picks", outcomes,
		h.counter.Count("JobClaimBatch")+h.counter.Count("JobClaimPlain"))
}

// A plain step costs exactly one outcome statement, and nothing else per step.
func TestPlainStepIsOneOutcomeStatement(t *testing.T) {
	t.Parallel()
	pgtest.SkipOnCitus(t, "it counts plain PostgreSQL's statements; on Citus an outcome is a transaction per shard (docs/citus.md)")
	h := newHarness(t, 30*time.Second)
	rcv := doneReceiver(t)
	h.handler(t, "h", rcv.URL, 3)
	job := h.insert(t, engine.NewJob{Handler: "h"})[0]
	h.counter.Reset()
	d := startDispatcher(t, h.eng, dispatch.Config{QueueRefresh: time.Hour, PollMin: time.Hour, PollMax: time.Hour})
	waitJob(t, h.db, job.ID, 10*time.Second, hasStatus("done"))
	d.Stop(context.Background())
	counts := h.counter.Snapshot()
	if counts["JobApplyPlainOutcomes"] != 1 || counts["JobApplyOutcomes"] != 0 {
		t.Fatalf("outcome statements: %v, want one JobApplyPlainOutcomes", counts)
	}
	// Everything else is per batch or per process, not per step: the queue load and its
	// read of the jobs table's size, the LISTEN ("other") and picks (the one that claimed
	// the step, and empty ones woken by the LISTEN connecting). JobGet is this test's own polling.
	for name := range counts {
		switch name {
		case "JobApplyPlainOutcomes", "JobClaimPlain", "JobReadyExists", "QueueList", "JobTablePages", "other", "JobGet":
		default:
			t.Fatalf("a plain step ran %s: %v", name, counts)
		}
	}
}
