package pg_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// rollupsRead sums the rows every scan of step_rollups read (a scan EXPLAIN shows as
// never executed does not count).
func rollupsRead(plan pgtest.PlanNode) (rows float64) {
	plan.Walk(func(n pgtest.PlanNode) {
		if n.RelationName == "step_rollups" && strings.Contains(n.NodeType, "Scan") && n.ActualLoops > 0 {
			rows += (n.ActualRows + n.RowsRemovedFilter) * n.ActualLoops
		}
	})
	return rows
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

// A queue's or a handler's series reads the rollups of its window only: 200 000 rollup
// rows over ten days, 140 in the last hour (60 of queue busy and handler h1, 30 of busy
// and h2, 50 of h1 on another queue); the hour's read rides the (queue, at) or (handler,
// at) index and reads about the window's rows, in a custom plan and in the generic plan a
// prepared statement ends up with. The steps history is not read at all.
func TestStepStatsReadsTheWindowOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.Open(t, pgtest.NewDatabase(t), pg.Options{MaxConns: 1})
	fast, slow, quick := engine.LatencyBucket(10*time.Millisecond), engine.LatencyBucket(100*time.Millisecond), engine.LatencyBucket(5*time.Millisecond)
	// Older rollups: 2 to 240 hours ago, both handlers, the queue and another.
	if _, err := db.Exec(ctx, `INSERT INTO step_rollups (at, queue, handler, ok, failed, done, total, latency_buckets, latency_counts)
		SELECT date_trunc('second', now() - interval '2 hours' - (i % 238) * interval '1 hour' - (i % 3600) * interval '1 second'),
		       CASE WHEN i % 2 = 0 THEN 'busy' ELSE 'other' END, 'h' || (1 + i % 2), 1, 0, 0, 1, ARRAY[$1::smallint], ARRAY[1]
		FROM generate_series(1, 200000) i`, fast); err != nil {
		t.Fatal(err)
	}
	// The last hour: h1's 60 seconds with attempts (one a minute: 40 ok taking 10 ms, 15
	// retried errors taking 100 ms, 5 fails taking 100 ms), h2's 30 ok, all on busy; and
	// 50 of h1 on another queue.
	if _, err := db.Exec(ctx, `INSERT INTO step_rollups (at, queue, handler, ok, failed, done, total, latency_buckets, latency_counts)
		SELECT date_trunc('second', now() - i * interval '55 seconds'), 'busy', 'h1',
		       (i <= 40)::int, (i > 55)::int, 0, 1, ARRAY[CASE WHEN i <= 40 THEN $1::smallint ELSE $2::smallint END], ARRAY[1]
		FROM generate_series(1, 60) i
		UNION ALL
		SELECT date_trunc('second', now() - i * interval '1 minute'), 'busy', 'h2', 1, 0, 1, 1, ARRAY[$3::smallint], ARRAY[1]
		FROM generate_series(1, 30) i
		UNION ALL
		SELECT date_trunc('second', now() - i * interval '1 minute'), 'elsewhere', 'h1', 1, 0, 0, 1, ARRAY[$1::smallint], ARRAY[1]
		FROM generate_series(1, 50) i`, fast, slow, quick); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `ANALYZE step_rollups`); err != nil {
		t.Fatal(err)
	}
	queue, handler := "busy", "h1"
	for _, c := range []struct {
		name           string
		queue, handler *string
		index          string
		want           int64 // rollup rows in the window
	}{
		{"queue", &queue, nil, "step_rollups_queue", 90},
		{"handler", nil, &handler, "step_rollups_handler", 110},
	} {
		for _, r := range customAndGenericPlans(t, db, pg.Statement("StepStats"), "stats_"+c.name, "int, bigint, text, text",
			fmt.Sprintf("61, 60000, %s, %s", literal(c.queue), literal(c.handler)), 61, int64(60_000), c.queue, c.handler) {
			generic, raw, plan := r.generic, r.raw, r.plan
			read := rollupsRead(plan)
			t.Logf("%s, generic %v: %.0f rollup rows read (%d in the window, 200 140 in the table)", c.name, generic, read, c.want)
			if read > float64(2*c.want) {
				t.Fatalf("%s, generic %v: %.0f rows read for %d in the window:\n%s", c.name, generic, read, c.want, raw)
			}
			uses := false
			plan.Walk(func(n pgtest.PlanNode) {
				uses = uses || n.IndexName == c.index
				if strings.HasPrefix(n.RelationName, "steps") {
					t.Fatalf("%s, generic %v: the series reads the history (%s):\n%s", c.name, generic, n.RelationName, raw)
				}
			})
			if !uses || plan.HasSeqScan("step_rollups") {
				t.Fatalf("%s, generic %v: the read does not ride its index:\n%s", c.name, generic, raw)
			}
		}
	}

	// The figures: one point per minute, h1's classes and latencies. The statement's now()
	// lies between before and after (a now read at the test's start was a minute behind
	// it once on a busy machine, and the last bucket's check failed).
	before, err := db.DatabaseNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	points, err := db.StepStats(ctx, pg.StepStatsParams{Handler: &handler, Bucket: time.Minute, Buckets: 61})
	if err != nil {
		t.Fatal(err)
	}
	after, err := db.DatabaseNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(points) != 61 {
		t.Fatalf("%d points for 61 buckets", len(points))
	}
	var ok, failed, total int64
	slowest := 0
	for i, p := range points {
		if i > 0 && !p.At.Equal(points[i-1].At.Add(time.Minute)) {
			t.Fatalf("point %d at %s follows %s", i, p.At, points[i-1].At)
		}
		ok, failed, total = ok+p.OK, failed+p.Failed, total+p.Total
		var n int64
		for j, c := range p.LatencyCounts {
			n += c
			if j > 0 && p.LatencyBuckets[j] <= p.LatencyBuckets[j-1] {
				t.Fatalf("point %+v: the histogram's buckets are not ascending", p)
			}
		}
		if n != p.Total || len(p.LatencyBuckets) != len(p.LatencyCounts) {
			t.Fatalf("point %+v: the histogram holds %d attempts of %d", p, n, p.Total)
		}
		for _, b := range p.LatencyBuckets {
			slowest = max(slowest, b)
		}
	}
	if ok != 90 || failed != 5 || total != 110 {
		t.Fatalf("h1's last hour: ok %d, failed %d, total %d; want 90, 5, 110", ok, failed, total)
	}
	if slowest != slow {
		t.Fatalf("the slowest bucket is %d, want %d (the 100 ms of the errors)", slowest, slow)
	}
	last := points[len(points)-1]
	if last.At.After(after) || !last.At.Add(time.Minute).After(before) {
		t.Fatalf("the last bucket [%s, +1m) does not hold the statement's now (between %s and %s)", last.At, before, after)
	}
}
