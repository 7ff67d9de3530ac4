package pg_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// stepsRead sums the rows every scan of a steps partition read, and lists the partitions
// scanned (a scan EXPLAIN shows as never executed does not count).
func stepsRead(plan pgtest.PlanNode) (rows float64, partitions []string) {
	plan.Walk(func(n pgtest.PlanNode) {
		if strings.HasPrefix(n.RelationName, "steps") && strings.Contains(n.NodeType, "Scan") && n.ActualLoops > 0 {
			rows += (n.ActualRows + n.RowsRemovedFilter) * n.ActualLoops
			partitions = append(partitions, n.RelationName)
		}
	})
	return rows, partitions
}

// planRun is one EXPLAIN ANALYZE of a statement: in a custom plan or in the generic plan.
type planRun struct {
	generic bool
	raw     []byte
	plan    pgtest.PlanNode
}

// customAndGenericPlans explains statement with args bound (a custom plan), then prepared
// as name(types) under force_generic_plan and executed with literals (the plan a prepared
// statement ends up with after its first executions). db must hold one connection.
func customAndGenericPlans(t *testing.T, db *pg.DB, statement, name, types, literals string, args ...any) []planRun {
	t.Helper()
	ctx := context.Background()
	custom, err := db.ExplainAnalyze(ctx, statement, args...)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"SET plan_cache_mode = force_generic_plan", "PREPARE " + name + "(" + types + ") AS " + statement} {
		if _, err := db.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	generic, err := db.ExplainAnalyze(ctx, "EXECUTE "+name+"("+literals+")")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, "RESET plan_cache_mode"); err != nil {
		t.Fatal(err)
	}
	var runs []planRun
	for i, raw := range [][]byte{custom, generic} {
		plan, err := pgtest.ParsePlan(raw)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, planRun{generic: i == 1, raw: raw, plan: plan})
	}
	return runs
}

// literal is a test name as an SQL literal (NULL for nil).
func literal(s *string) string {
	if s == nil {
		return "NULL"
	}
	return "'" + *s + "'"
}

// A queue's or a handler's series reads the steps of its window only: 200 000 steps over
// ten daily partitions, 90 of them in the last hour (60 of queue busy and handler h1, 30
// of busy and h2); the hour's read touches today's partitions, rides the (queue,
// finished_at) or (handler, finished_at) index, and reads about the window's rows, in a
// custom plan and in the generic plan a prepared statement ends up with.
func TestStepStatsReadsTheWindowOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.Open(t, pgtest.NewDatabase(t), pg.Options{MaxConns: 1})
	now, err := db.DatabaseNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	day := 24 * time.Hour
	today := now.UTC().Truncate(day)
	for d := -10; d < 2; d++ {
		if _, err := db.StepPartitionCreate(ctx, today.Add(time.Duration(d)*day), today.Add(time.Duration(d+1)*day), time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// Old history: 2 to 240 hours ago, both handlers, the queue and another.
	if _, err := db.Exec(ctx, `INSERT INTO steps (job_id, queue, handler, step, attempt, outcome, started_at, finished_at)
		SELECT i, CASE WHEN i % 2 = 0 THEN 'busy' ELSE 'other' END, 'h' || (1 + i % 2), 0, 1, 'next',
		       now() - interval '2 hours' - (i % 238) * interval '1 hour' - interval '50 ms', now() - interval '2 hours' - (i % 238) * interval '1 hour'
		FROM generate_series(1, 200000) i`); err != nil {
		t.Fatal(err)
	}
	// The last hour: h1's 60 attempts (one a minute: 40 ok taking 10 ms, 15 retried
	// errors taking 100 ms, 5 fails), h2's 30 ok, all on busy; and 50 of h1 on another queue.
	if _, err := db.Exec(ctx, `INSERT INTO steps (job_id, queue, handler, step, attempt, outcome, started_at, finished_at)
		SELECT i, 'busy', 'h1', 0, 1, o, f - CASE WHEN o = 'next' THEN interval '10 ms' ELSE interval '100 ms' END, f
		FROM (SELECT i, now() - i * interval '55 seconds' AS f,
		             CASE WHEN i <= 40 THEN 'next' WHEN i <= 55 THEN 'http_error' ELSE 'fail' END AS o
		      FROM generate_series(1, 60) i) x
		UNION ALL
		SELECT i, 'busy', 'h2', 0, 1, 'done', now() - i * interval '1 minute' - interval '5 ms', now() - i * interval '1 minute'
		FROM generate_series(1, 30) i
		UNION ALL
		SELECT i, 'elsewhere', 'h1', 0, 1, 'next', now() - i * interval '1 minute', now() - i * interval '1 minute'
		FROM generate_series(1, 50) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `ANALYZE steps`); err != nil {
		t.Fatal(err)
	}
	queue, handler := "busy", "h1"
	for _, c := range []struct {
		name           string
		queue, handler *string
		index          string
		want           int64 // steps in the window
	}{
		{"queue", &queue, nil, "queue_finished", 90},
		{"handler", nil, &handler, "handler_finished", 110},
	} {
		for _, r := range customAndGenericPlans(t, db, pg.Statement("StepStats"), "stats_"+c.name, "int, bigint, text, text",
			fmt.Sprintf("61, 60000, %s, %s", literal(c.queue), literal(c.handler)), 61, int64(60_000), c.queue, c.handler) {
			generic, raw, plan := r.generic, r.raw, r.plan
			read, partitions := stepsRead(plan)
			t.Logf("%s, generic %v: %.0f rows of steps read from %v (%d in the window, 200 000 in the history)",
				c.name, generic, read, partitions, c.want)
			if read > float64(2*c.want) || len(partitions) > 3 {
				t.Fatalf("%s, generic %v: %.0f rows read from %d partitions for %d steps in the window:\n%s",
					c.name, generic, read, len(partitions), c.want, raw)
			}
			uses := false
			plan.Walk(func(n pgtest.PlanNode) { uses = uses || strings.Contains(n.IndexName, c.index) })
			if !uses || plan.HasSeqScan("steps") {
				t.Fatalf("%s, generic %v: the read does not ride its index:\n%s", c.name, generic, raw)
			}
		}
	}

	// The figures: one point per minute, h1's classes and latencies.
	points, err := db.StepStats(ctx, pg.StepStatsParams{Handler: &handler, Bucket: time.Minute, Buckets: 61})
	if err != nil {
		t.Fatal(err)
	}
	if len(points) != 61 {
		t.Fatalf("%d points for 61 buckets", len(points))
	}
	var ok, failed, total int64
	var slowest float64
	for i, p := range points {
		if i > 0 && !p.At.Equal(points[i-1].At.Add(time.Minute)) {
			t.Fatalf("point %d at %s follows %s", i, p.At, points[i-1].At)
		}
		ok, failed, total = ok+p.OK, failed+p.Failed, total+p.Total
		if p.Total == 0 && p.LatencyMs != nil || p.Total > 0 && len(p.LatencyMs) != 3 {
			t.Fatalf("point %+v: latency without steps, or steps without latency", p)
		}
		for _, l := range p.LatencyMs {
			slowest = max(slowest, l)
		}
	}
	if ok != 90 || failed != 5 || total != 110 {
		t.Fatalf("h1's last hour: ok %d, failed %d, total %d; want 90, 5, 110", ok, failed, total)
	}
	if slowest < 99 || slowest > 101 {
		t.Fatalf("the slowest percentile is %.1f ms, want the 100 ms of the errors", slowest)
	}
	last := points[len(points)-1]
	if last.At.After(now.Add(time.Second)) || last.At.Add(time.Minute).Before(now) {
		t.Fatalf("the last bucket [%s, +1m) does not hold now (%s)", last.At, now)
	}
}
