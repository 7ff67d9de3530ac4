package pg_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// seedJobs bulk-loads n runnable jobs on queue with generate_series (fixture only).
func seedJobs(t *testing.T, db *pg.DB, queue string, n int, extra string) {
	t.Helper()
	ctx := context.Background()
	if _, err := db.Exec(ctx, `INSERT INTO handlers (name, url, secret) VALUES ('h', 'http://example.test/', 'whsec_x')
		ON CONFLICT DO NOTHING`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO jobs (queue, handler, max_attempts, priority, eligible_at`+extra+`)
		SELECT $1, 'h', 5, (i % 10)::smallint, now() - (i % 1000) * interval '1 second'`+map[bool]string{true: ", 'k' || i", false: ""}[extra != ""]+`
		FROM generate_series(1, $2) i`, queue, n); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `ANALYZE jobs`); err != nil {
		t.Fatal(err)
	}
}

// explained is the parsed plan of an EXPLAIN (ANALYZE, FORMAT JSON) answer.
func explained(t *testing.T, raw []byte, err error) pgtest.PlanNode {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	plan, err := pgtest.ParsePlan(raw)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// The pick reads about `batch` rows whatever the backlog (seed 003's test): every scan
// node reads at most 2 × batch rows of jobs with 100 000 runnable rows queued.
func TestPickReadsAtMostTwiceTheBatch(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	seedJobs(t, db, "bulk", 100_000, "")
	seedJobs(t, db, "other", 20_000, "")
	for _, name := range []string{"JobClaimBatch", "JobClaimPlain"} {
		for _, batch := range []int{1, 10, 50, 200} {
			raw, err := db.ExplainAnalyze(context.Background(), pg.Statement(name),
				"bulk", batch, int64(30_000), "explain", 100)
			if err != nil {
				t.Fatal(err)
			}
			plan, err := pgtest.ParsePlan(raw)
			if err != nil {
				t.Fatal(err)
			}
			if !plan.Uses("jobs_pick") || plan.HasSeqScan("jobs") {
				t.Fatalf("%s, batch %d: the pick does not ride jobs_pick:\n%s", name, batch, raw)
			}
			read := plan.MaxRowsRead("jobs")
			t.Logf("%s, batch %d: at most %.0f rows of jobs read by one node (100 000 runnable queued)", name, batch, read)
			if read > float64(2*batch) {
				t.Fatalf("%s, batch %d: a plan node read %.0f rows of jobs, more than 2 × batch:\n%s", name, batch, read, raw)
			}
		}
	}
}

// Statement budget: a pick of B rows is one statement.
func TestPickIsOneStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	counter := &pg.StatementCounter{}
	db := pgtest.Open(t, url, pg.Options{Counter: counter})
	seedJobs(t, db, "q", 500, "")
	counter.Reset()
	got, err := db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: "q", Limit: 50, LeaseTTL: time.Minute, Owner: "t", SignalCap: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 50 {
		t.Fatalf("claimed %d rows, want 50", len(got))
	}
	if total := counter.Snapshot(); total["JobClaimBatch"] != 1 || len(total) != 1 {
		t.Fatalf("a pick of 50 rows ran %v, want exactly one JobClaimBatch", total)
	}
	// Claimed in priority, eligibility, id order.
	for i := 1; i < len(got); i++ {
		if got[i].ID == got[i-1].ID {
			t.Fatal("duplicate row claimed")
		}
	}
}

// Flow control costs nothing on a queue that does not use it: the gate and rate-bucket
// reads of the pick never execute, and the scan still stops at the batch.
func TestPickPaysNothingForUnusedFlowControl(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	seedJobs(t, db, "plain", 100_000, "")
	// Other queues do use gates and rate limits.
	if _, err := db.Exec(ctx, `INSERT INTO rate_limits (name, rate, burst) VALUES ('api', 10, 10)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.GateUpsert(ctx, "tenant", 3, 2); err != nil {
		t.Fatal(err)
	}
	raw, err := db.ExplainAnalyze(ctx, pg.Statement("JobClaimBatch"), "plain", 50, int64(30_000), "explain", 100)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := pgtest.ParsePlan(raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"gate_slots", "rate_buckets", "rate_limits", "gates"} {
		if !plan.NeverExecuted(rel) {
			t.Errorf("the pick read %s on a queue without flow control:\n%s", rel, raw)
		}
	}
	if read := plan.MaxRowsRead("jobs"); read > 100 {
		t.Fatalf("a node read %.0f rows of jobs for a batch of 50", read)
	}
}

// With gated and rate-limited rows in the window, admission does run, and still reads
// only the batch from jobs.
func TestPickAdmissionRunsWhenUsed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	seedJobs(t, db, "busy", 10_000, "")
	if _, err := db.Exec(ctx, `INSERT INTO rate_limits (name, rate, burst) VALUES ('api', 10, 10)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.GateUpsert(ctx, "tenant", 3, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `UPDATE jobs SET concurrency_key = 'tenant' WHERE id % 3 = 0;
		UPDATE jobs SET rate_limit = 'api', rate_key = 'k' || (id % 7) WHERE id % 3 = 1`); err != nil {
		t.Fatal(err)
	}
	raw, err := db.ExplainAnalyze(ctx, pg.Statement("JobClaimBatch"), "busy", 50, int64(30_000), "explain", 100)
	if err != nil {
		t.Fatal(err)
	}
	plan, _ := pgtest.ParsePlan(raw)
	if plan.NeverExecuted("gate_slots") || plan.NeverExecuted("rate_limits") {
		t.Fatalf("admission did not run with gated and rate-limited candidates:\n%s", raw)
	}
	if read := plan.MaxRowsRead("jobs"); read > 100 {
		t.Fatalf("a node read %.0f rows of jobs for a batch of 50:\n%s", read, raw)
	}
}

// Jobs naming several rate limits: admission expands them, and the pick still reads only
// the batch from jobs and probes rate_buckets by key (100 000 buckets exist), under the
// custom and the generic plan.
func TestPickWithSeveralRateLimitsStaysOnTheIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.Open(t, pgtest.NewDatabase(t), pg.Options{MaxConns: 1})
	seedJobs(t, db, "multi", 10_000, "")
	if _, err := db.Exec(ctx, `INSERT INTO rate_limits (name, rate, burst) VALUES ('api', 10, 10), ('email', 10, 10);
		INSERT INTO rate_buckets (name, key, tokens) SELECT 'api', 'other-' || i, 10 FROM generate_series(1, 100000) i;
		UPDATE jobs SET rate_limit = 'api', rate_key = 'k' || (id % 7),
		       extra_rate_limits = jsonb_build_array(jsonb_build_object('name', 'email', 'key', 'k' || (id % 5), 'weight', 1))
		WHERE id % 2 = 0;
		ANALYZE rate_buckets; ANALYZE jobs`); err != nil {
		t.Fatal(err)
	}
	check := func(what string, raw []byte) {
		t.Helper()
		plan, err := pgtest.ParsePlan(raw)
		if err != nil {
			t.Fatal(err)
		}
		if plan.NeverExecuted("rate_limits") {
			t.Fatalf("%s: admission did not run:\n%s", what, raw)
		}
		if plan.HasSeqScan("jobs") || plan.HasSeqScan("rate_buckets") {
			t.Fatalf("%s: a sequential scan in the pick:\n%s", what, raw)
		}
		if read := plan.MaxRowsRead("jobs"); read > 100 {
			t.Fatalf("%s: a node read %.0f rows of jobs for a batch of 50:\n%s", what, read, raw)
		}
		if read := plan.MaxRowsRead("rate_buckets"); read > 100 {
			t.Fatalf("%s: a node read %.0f rows of rate_buckets for a batch of 50:\n%s", what, read, raw)
		}
	}
	raw, err := db.ExplainAnalyze(ctx, pg.Statement("JobClaimBatch"), "multi", 50, int64(30_000), "explain", 100)
	if err != nil {
		t.Fatal(err)
	}
	check("custom plan", raw)
	if _, err := db.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, "PREPARE pick(text, int, bigint, text, int) AS "+pg.Statement("JobClaimBatch")); err != nil {
		t.Fatal(err)
	}
	if raw, err = db.ExplainAnalyze(ctx, "EXECUTE pick('multi', 50, 30000, 'explain', 100)"); err != nil {
		t.Fatal(err)
	}
	check("generic plan", raw)
}

// A connection reuses a cached generic plan for a prepared statement once Postgres finds
// it no costlier than the custom ones; a generic plan cannot see LIMIT $2. The pick must
// still read only the batch then, and never scan the whole table.
func TestPickGenericPlanStaysOnTheIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.Open(t, pgtest.NewDatabase(t), pg.Options{MaxConns: 1})
	seedJobs(t, db, "q", 100_000, "")
	if _, err := db.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"JobClaimBatch", "JobClaimPlain"} {
		if _, err := db.Exec(ctx, fmt.Sprintf("PREPARE pick%d(text, int, bigint, text, int) AS ", i)+pg.Statement(name)); err != nil {
			t.Fatal(err)
		}
		raw, err := db.ExplainAnalyze(ctx, fmt.Sprintf("EXECUTE pick%d('q', 50, 30000, 'explain', 100)", i))
		if err != nil {
			t.Fatal(err)
		}
		plan, _ := pgtest.ParsePlan(raw)
		if plan.HasSeqScan("jobs") {
			t.Fatalf("the generic plan of %s scans jobs sequentially:\n%s", name, raw)
		}
		if read := plan.MaxRowsRead("jobs"); read > 100 {
			t.Fatalf("the generic plan of %s read %.0f rows of jobs for a batch of 50", name, read)
		}
	}
}

// GC at 1 000 000 rows: the id select rides jobs_gc and stops at the batch; the delete is
// primary-key lookups (no sequential scan of jobs), so a sweep costs the batch, not the table.
func TestGCIsProportionalToTheBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("seeds a million rows")
	}
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	if _, err := db.Exec(ctx, `INSERT INTO handlers (name, url, secret) VALUES ('h', 'http://example.test/', 'whsec_x')`); err != nil {
		t.Fatal(err)
	}
	// 800 000 old finished, 100 000 finished children of live parents, 100 000 live.
	if _, err := db.Exec(ctx, `
		INSERT INTO jobs (queue, handler, max_attempts, status, finished_at)
		SELECT 'q', 'h', 5, (ARRAY['done','failed','cancelled'])[1 + i % 3], now() - interval '30 days' + i * interval '1 ms'
		FROM generate_series(1, 800000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO jobs (queue, handler, max_attempts, status) SELECT 'q', 'h', 5, 'awaiting' FROM generate_series(1, 100000)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `
		INSERT INTO jobs (queue, handler, max_attempts, status, finished_at, parent_id)
		SELECT 'q', 'h', 5, 'done', now() - interval '40 days', 800000 + i FROM generate_series(1, 100000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `VACUUM ANALYZE jobs`); err != nil {
		t.Fatal(err)
	}
	week := int64((7 * 24 * time.Hour).Milliseconds())
	raw, err := db.ExplainAnalyze(ctx, pg.Statement("JobGCSelect"), week, 1000)
	if err != nil {
		t.Fatal(err)
	}
	plan, _ := pgtest.ParsePlan(raw)
	if plan.HasSeqScan("jobs") || !plan.Uses("jobs_gc") {
		t.Fatalf("the GC select does not ride jobs_gc:\n%s", raw)
	}
	// Known cost (docs/performance.md): finished children of still-live parents are
	// skipped one index entry at a time; here 100 000 of them sit ahead of the batch.
	t.Logf("GC select at 1M rows: at most %.0f rows of jobs read by a node (1000 collected, 100 000 children of live parents passed over)",
		plan.MaxRowsRead("jobs"))
	ids, err := db.JobGCSelect(ctx, 7*24*time.Hour, 1000)
	if err != nil || len(ids) != 1000 {
		t.Fatalf("selected %d (%v)", len(ids), err)
	}
	raw, err = db.ExplainAnalyze(ctx, pg.Statement("JobGCDelete"), ids)
	if err != nil {
		t.Fatal(err)
	}
	plan, _ = pgtest.ParsePlan(raw)
	if plan.HasSeqScan("jobs") || !plan.Uses("jobs_pkey") {
		t.Fatalf("the GC delete does not ride jobs_pkey:\n%s", raw)
	}
	if read := plan.MaxRowsRead("jobs"); read > 2000 {
		t.Fatalf("the GC delete read %.0f rows of jobs for 1000 ids", read)
	}
}

// Far-future work at an urgent priority (delayed jobs, or a dead handler's parked
// backlog) is not walked past: the pick descends jobs_pick once per priority and each
// descent stops at its first row not yet due.
func TestPickDoesNotWalkPastNotYetDueRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.Open(t, pgtest.NewDatabase(t), pg.Options{MaxConns: 1}) // the generic plan is prepared on it
	seedJobs(t, db, "other", 10, "")
	if _, err := db.Exec(ctx, `INSERT INTO jobs (queue, handler, max_attempts, priority, eligible_at)
		SELECT 'q', 'h', 5, (CASE WHEN i % 2 = 0 THEN 0 ELSE 5 END)::smallint, now() + interval '1 hour' + i * interval '1 second'
		FROM generate_series(1, 20000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO jobs (queue, handler, max_attempts, priority, eligible_at)
		SELECT 'q', 'h', 5, 5, now() - i * interval '1 second' FROM generate_series(1, 30) i; ANALYZE jobs`); err != nil {
		t.Fatal(err)
	}
	check := func(mode string, raw []byte, err error) {
		t.Helper()
		plan := explained(t, raw, err)
		// Rows read stay at 30 either way; what the walk costs shows in the index's buffers
		// (entries an index condition skips are counted by no row count): 140 buffers when
		// the pick was one range scan of the queue, 21 with one descent per priority.
		read, blocks := plan.MaxRowsRead("jobs"), plan.IndexBlocks("jobs_pick")
		t.Logf("%s plan: a pick of 100 read at most %.0f rows of jobs and %.0f buffers of jobs_pick (30 due, 20 000 not yet due)", mode, read, blocks)
		if read > 2*30+10 || blocks > 40 {
			t.Fatalf("%s plan: the pick read %.0f rows of jobs and %.0f buffers of jobs_pick to claim 30:\n%s", mode, read, blocks, raw)
		}
	}
	raw, err := db.ExplainAnalyze(ctx, pg.Statement("JobClaimBatch"), "q", 100, int64(30_000), "explain", 100)
	check("custom", raw, err)
	if _, err := db.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, "PREPARE pick(text, int, bigint, text, int) AS "+pg.Statement("JobClaimBatch")); err != nil {
		t.Fatal(err)
	}
	raw, err = db.ExplainAnalyze(ctx, "EXECUTE pick('q', 100, 30000, 'explain', 100)")
	check("generic", raw, err)
	got, err := db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: "q", Limit: 100, LeaseTTL: time.Minute, Owner: "t", SignalCap: 100})
	if err != nil || len(got) != 30 {
		t.Fatalf("claimed %d rows (%v), want the 30 due", len(got), err)
	}
}

// The ready probe after an empty pick descends jobs_pick once per priority and stops at
// each first due entry, under the generic plan the server uses, whatever else the table
// holds: here 100 000 finished jobs of another queue, 20 000 not yet due at the most
// urgent priority, and the statistics of a queue that was all runnable when they were
// gathered (its generic plan was a sequential scan of jobs: 14-16 ms a probe).
func TestReadyProbeStaysOnThePickIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.Open(t, pgtest.NewDatabase(t), pg.Options{MaxConns: 1}) // the generic plan is prepared on it
	for _, sql := range []string{
		`INSERT INTO handlers (name, url, secret) VALUES ('h', 'http://example.test/', 'whsec_x')`,
		`INSERT INTO jobs (queue, handler, max_attempts, status, finished_at)
			SELECT 'old', 'h', 5, 'done', now() FROM generate_series(1, 100000)`,
		`INSERT INTO jobs (queue, handler, max_attempts) SELECT 'q', 'h', 5 FROM generate_series(1, 20000)`,
		`INSERT INTO jobs (queue, handler, max_attempts, priority, eligible_at)
			SELECT 'later', 'h', 5, 0, now() + interval '1 hour' FROM generate_series(1, 20000)`,
		`ANALYZE jobs`,
		// The drain went on after the statistics: 20 of q's jobs are left runnable.
		`UPDATE jobs SET status = 'done', finished_at = now() WHERE queue = 'q' AND id % 1000 <> 0`,
		`INSERT INTO jobs (queue, handler, max_attempts, priority) VALUES ('later', 'h', 5, 7)`,
		`SET plan_cache_mode = force_generic_plan`,
		`PREPARE ready(text) AS ` + pg.Statement("JobReadyExists"),
	} {
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	for _, c := range []struct {
		queue string
		ready bool
	}{{"q", true}, {"later", true}, {"old", false}, {"none", false}} {
		raw, err := db.ExplainAnalyze(ctx, "EXECUTE ready('"+c.queue+"')")
		plan := explained(t, raw, err)
		read, blocks := plan.MaxRowsRead("jobs"), plan.IndexBlocks("jobs_pick")
		t.Logf("queue %s: at most %.0f rows of jobs read, %.0f buffers of jobs_pick", c.queue, read, blocks)
		// Ten descents of three levels are 30 buffers; q's also walks the entries its
		// drain left dead before its first runnable row (61 here). The sequential scan read
		// 30 804.
		if plan.HasSeqScan("jobs") || !plan.Uses("jobs_pick") || read > 10 || blocks > 100 {
			t.Fatalf("queue %s: the ready probe read %.0f rows of jobs and %.0f buffers of jobs_pick:\n%s", c.queue, read, blocks, raw)
		}
		got, err := db.JobReadyExists(ctx, c.queue)
		if err != nil || got != c.ready {
			t.Fatalf("queue %s: ready %v (%v), want %v", c.queue, got, err, c.ready)
		}
	}
}
