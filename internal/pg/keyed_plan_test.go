package pg_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// keyedPlan is the part of EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) this file reads.
type keyedPlan struct {
	NodeType     string      `json:"Node Type"`
	RelationName string      `json:"Relation Name"`
	IndexName    string      `json:"Index Name"`
	Filter       string      `json:"Filter"`
	ActualLoops  float64     `json:"Actual Loops"`
	SharedHit    int64       `json:"Shared Hit Blocks"`
	SharedRead   int64       `json:"Shared Read Blocks"`
	Plans        []keyedPlan `json:"Plans"`
}

func (n keyedPlan) walk(fn func(keyedPlan)) {
	fn(n)
	for _, c := range n.Plans {
		c.walk(fn)
	}
}

// probes counts the executions of every scan of index (one per loop).
func (n keyedPlan) probes(index string) float64 {
	var loops float64
	n.walk(func(p keyedPlan) {
		if p.IndexName == index {
			loops += p.ActualLoops
		}
	})
	return loops
}

// pickFigures is one EXPLAIN ANALYZE of the pick.
type pickFigures struct {
	plan     pgtest.PlanNode
	tree     keyedPlan
	raw      []byte
	took     time.Duration
	buffers  int64
	claimed  float64
	probes   float64
	jobsRead float64
}

// TestKeyedPickAtScale holds issue 17: the pick of a keyed batch reads O(batch) rows and
// buffers however many steps are in flight, under a forced generic plan (what the server
// runs: internal/pg sets plan_cache_mode) and under custom plans. One table is built
// once with generate_series: 300 000 runnable keyed rows (100 000 distinct keys), 50 000
// keyless ones, 20 000 gated ones over 10 000 gates of 2 shards, 20 000 rate-limited ones
// over 100 000 rate buckets, 300 000 finished rows; then 1 000, 10 000 and 100 000
// executing rows, each with its own ungated concurrency key (so all of them are in
// jobs_concurrency_exclusive, the worst case for the probe).
//
// At every size and in both plan modes, a pick of 50 reads at most 2 × 50 rows of jobs
// in any plan node, runs the K=1 guard as at most 50 probes of jobs_concurrency_exclusive
// (never as a hashed scan of the executing set), and reads gates, gate_slots and
// rate_buckets only by key; its buffers at 100 000 executing rows stay within 1.25× of
// those at 1 000. Against the former NOT EXISTS guard the generic plan hashed all
// 100 000 executing rows (40 ms a pick, 3 900 buffers against 1 100).
func TestKeyedPickAtScale(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 700 000-row jobs table")
	}
	t.Parallel()
	ctx := context.Background()
	// One connection: the SET and PREPARE below belong to it.
	db := pgtest.Open(t, pgtest.NewDatabase(t), pg.Options{MaxConns: 1})
	must := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%v\n%s", err, sql)
		}
	}
	started := time.Now()
	must(`INSERT INTO handlers (name, url, secret) VALUES ('h', 'http://example.test/', 'whsec_x')`)
	must(`INSERT INTO jobs (queue, handler, max_attempts, status, finished_at)
		SELECT 'keyed', 'h', 5, (ARRAY['done','failed','cancelled'])[1 + i % 3], now() - i * interval '1 second'
		FROM generate_series(1, 300000) i`)
	must(`INSERT INTO jobs (queue, handler, max_attempts, priority, eligible_at, concurrency_key)
		SELECT 'keyed', 'h', 5, (i % 10)::smallint, now() - (i % 1000) * interval '1 second', 'k' || (i % 100000)
		FROM generate_series(1, 300000) i`)
	must(`INSERT INTO jobs (queue, handler, max_attempts, priority, eligible_at)
		SELECT 'plain', 'h', 5, (i % 10)::smallint, now() - (i % 1000) * interval '1 second'
		FROM generate_series(1, 50000) i`)
	must(`INSERT INTO gates (key, "limit", shards) SELECT 'g' || i, 4, 2 FROM generate_series(1, 10000) i`)
	must(`INSERT INTO gate_slots (key, shard, available, cap)
		SELECT 'g' || i, s, 2, 2 FROM generate_series(1, 10000) i, generate_series(0, 1) s`)
	must(`INSERT INTO jobs (queue, handler, max_attempts, priority, eligible_at, concurrency_key)
		SELECT 'gated', 'h', 5, (i % 10)::smallint, now() - (i % 1000) * interval '1 second', 'g' || (1 + i % 10000)
		FROM generate_series(1, 20000) i`)
	must(`INSERT INTO rate_limits (name, rate, burst) VALUES ('api', 1000, 1000)`)
	must(`INSERT INTO rate_buckets (name, key, tokens) SELECT 'api', 'r' || i, 1000 FROM generate_series(1, 100000) i`)
	must(`INSERT INTO jobs (queue, handler, max_attempts, priority, eligible_at, rate_limit, rate_key)
		SELECT 'rated', 'h', 5, (i % 10)::smallint, now() - (i % 1000) * interval '1 second', 'api', 'r' || (1 + i % 100000)
		FROM generate_series(1, 20000) i`)
	must(`PREPARE pick(text, int, bigint, text, int) AS ` + pg.Statement("JobClaimBatch"))
	must(`PREPARE outcome AS ` + pg.Statement("JobApplyOutcomes"))

	// explainOutcome is one EXPLAIN ANALYZE of 50 `done` outcomes for executing rows (in
	// a rolled-back transaction): the rows of jobs its nodes read, and its buffers.
	explainOutcome := func() (read float64, buffers int64, raw []byte) {
		t.Helper()
		rows, err := db.QueryStrings(ctx, `SELECT format('EXECUTE outcome(%L::jsonb)',
				jsonb_agg(jsonb_build_object('id', id, 'token', lease_token, 'kind', 'done', 'label', 'done')))
			FROM (SELECT id, lease_token FROM jobs WHERE status = 'executing' ORDER BY id DESC LIMIT 50) e`)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 { // the second, warm run counts
			raw, err = db.ExplainAnalyze(ctx, rows[0][0])
			if err != nil {
				t.Fatal(err)
			}
		}
		var top []struct {
			Plan keyedPlan `json:"Plan"`
		}
		if err := json.Unmarshal(raw, &top); err != nil || len(top) == 0 {
			t.Fatalf("bad plan (%v): %s", err, raw)
		}
		plan, err := pgtest.ParsePlan(raw)
		if err != nil {
			t.Fatal(err)
		}
		if plan.ActualRows != 50 {
			t.Fatalf("the outcome applied %.0f of 50:\n%s", plan.ActualRows, raw)
		}
		return plan.MaxRowsRead("jobs"), top[0].Plan.SharedHit + top[0].Plan.SharedRead, raw
	}
	outcomeBuffers := map[string]int64{} // mode/executing

	explain := func(queue string) pickFigures {
		t.Helper()
		var f pickFigures
		// One warm-up run, then five: the plan and buffers of the last, the median time.
		// Each runs in a rolled-back transaction, so the table is the same for every size
		// and mode.
		var times []time.Duration
		for i := range 6 {
			raw, err := db.ExplainAnalyze(ctx, fmt.Sprintf("EXECUTE pick('%s', 50, 30000, 'explain', 100)", queue))
			if err != nil {
				t.Fatal(err)
			}
			var top []struct {
				Plan          keyedPlan `json:"Plan"`
				ExecutionTime float64   `json:"Execution Time"`
			}
			if err := json.Unmarshal(raw, &top); err != nil || len(top) == 0 {
				t.Fatalf("bad plan (%v): %s", err, raw)
			}
			plan, err := pgtest.ParsePlan(raw)
			if err != nil {
				t.Fatal(err)
			}
			f = pickFigures{
				plan: plan, tree: top[0].Plan, raw: raw,
				took:     time.Duration(top[0].ExecutionTime * float64(time.Millisecond)),
				buffers:  top[0].Plan.SharedHit + top[0].Plan.SharedRead,
				claimed:  plan.ActualRows,
				probes:   top[0].Plan.probes("jobs_concurrency_exclusive"),
				jobsRead: plan.MaxRowsRead("jobs"),
			}
			if i > 0 {
				times = append(times, f.took)
			}
		}
		slices.Sort(times)
		f.took = times[len(times)/2]
		return f
	}

	const batch = 50
	queues := []string{"keyed", "plain", "gated", "rated"}
	modes := []string{"generic", "custom"}
	figures := map[string]pickFigures{} // mode/queue/executing
	executing := 0
	for _, n := range []int{1_000, 10_000, 100_000} {
		must(`INSERT INTO jobs (queue, handler, max_attempts, status, attempt, lease_token, lease_expires_at,
				attempted_at, concurrency_key)
			SELECT 'keyed', 'h', 5, 'executing', 1, gen_random_uuid(), now() + interval '30 seconds', now(), 'e' || i
			FROM generate_series($1::int + 1, $2::int) i`, executing, n)
		executing = n
		must(`VACUUM ANALYZE jobs`)
		for _, mode := range modes {
			must("SET plan_cache_mode = force_" + mode + "_plan")
			// The outcome of 50 steps reads its 50 rows by primary key, however many are in
			// flight (it once hash-joined jobs_lease, the whole executing set).
			t.Run(fmt.Sprintf("%s/outcome/%d", mode, n), func(t *testing.T) {
				read, buffers, raw := explainOutcome()
				outcomeBuffers[fmt.Sprintf("%s/%d", mode, n)] = buffers
				t.Logf("%d executing, %s plan: 50 outcomes read at most %.0f rows of jobs in a node, %d buffers", n, mode, read, buffers)
				if read > 2*batch {
					t.Errorf("a node of the outcome read %.0f rows of jobs for 50 outcomes with %d executing:\n%s", read, n, raw)
				}
			})
			for _, q := range queues {
				name := fmt.Sprintf("%s/%s/%d", mode, q, n)
				t.Run(name, func(t *testing.T) {
					f := explain(q)
					figures[name] = f
					t.Logf("%d executing, %s plan, queue %s: claimed %.0f, median %s, %d buffers, at most %.0f rows of jobs read by a node, %.0f K=1 probes",
						n, mode, q, f.claimed, f.took.Round(10*time.Microsecond), f.buffers, f.jobsRead, f.probes)
					if f.claimed == 0 {
						t.Fatalf("the pick claimed nothing:\n%s", f.raw)
					}
					if f.jobsRead > 2*batch {
						t.Errorf("a plan node read %.0f rows of jobs for a batch of %d with %d executing:\n%s",
							f.jobsRead, batch, n, f.raw)
					}
					f.tree.walk(func(p keyedPlan) {
						if p.IndexName == "jobs_pick" && strings.Contains(p.Filter, "hashed") {
							t.Errorf("the K=1 guard is a hashed subplan, not a probe: %s", p.Filter)
						}
					})
					switch q {
					case "plain":
						for _, rel := range []string{"gate_slots", "rate_buckets", "rate_limits", "gates"} {
							if !f.plan.NeverExecuted(rel) {
								t.Errorf("a keyless pick read %s:\n%s", rel, f.raw)
							}
						}
						if f.probes != 0 {
							t.Errorf("a keyless pick probed jobs_concurrency_exclusive %.0f times", f.probes)
						}
					case "keyed", "gated":
						if f.probes == 0 || f.probes > batch {
							t.Errorf("the K=1 guard ran %.0f probes of jobs_concurrency_exclusive for a batch of %d:\n%s",
								f.probes, batch, f.raw)
						}
					}
					// Flow control reads by key: at most the batch's keys (× 2 shards).
					for _, rel := range []string{"gates", "gate_slots", "rate_buckets"} {
						f.tree.walk(func(p keyedPlan) {
							if p.NodeType == "Seq Scan" && p.RelationName == rel && p.ActualLoops > 0 {
								t.Errorf("the pick scans %s sequentially:\n%s", rel, f.raw)
							}
						})
						if read := f.plan.MaxRowsRead(rel); read > 2*batch {
							t.Errorf("a plan node read %.0f rows of %s for a batch of %d:\n%s", read, rel, batch, f.raw)
						}
					}
					if q == "gated" && f.plan.NeverExecuted("gate_slots") || q == "rated" && f.plan.NeverExecuted("rate_buckets") {
						t.Errorf("admission did not run on queue %s:\n%s", q, f.raw)
					}
				})
			}
		}
	}
	must("RESET plan_cache_mode")
	for _, mode := range modes {
		small, large := outcomeBuffers[mode+"/1000"], outcomeBuffers[mode+"/100000"]
		if small > 0 && float64(large) > 1.25*float64(small) {
			t.Errorf("%s plan: 50 outcomes took %d buffers at 100 000 executing rows against %d at 1 000", mode, large, small)
		}
	}
	for _, mode := range modes {
		for _, q := range queues {
			small, large := figures[fmt.Sprintf("%s/%s/1000", mode, q)], figures[fmt.Sprintf("%s/%s/100000", mode, q)]
			if small.buffers == 0 || large.buffers == 0 {
				continue // its subtest failed already
			}
			if float64(large.buffers) > 1.25*float64(small.buffers) {
				t.Errorf("%s plan, queue %s: the pick took %d buffers at 100 000 executing rows against %d at 1 000 (more than 1.25×)",
					mode, q, large.buffers, small.buffers)
			}
		}
	}

	// The guard still guards: a candidate whose key is executing is skipped, the others
	// are claimed (a real pick, through the pool's prepared statement).
	var head string
	rows, err := db.QueryStrings(ctx, `SELECT concurrency_key FROM jobs WHERE queue = 'keyed' AND status = 'runnable'
		ORDER BY priority, eligible_at, id LIMIT 1`)
	if err != nil || len(rows) != 1 {
		t.Fatalf("head: %v %v", rows, err)
	}
	head = rows[0][0]
	must(`INSERT INTO jobs (queue, handler, max_attempts, status, lease_token, lease_expires_at, concurrency_key)
		VALUES ('keyed', 'h', 5, 'executing', gen_random_uuid(), now() + interval '30 seconds', $1)`, head)
	got, err := db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: "keyed", Limit: batch, LeaseTTL: time.Minute, Owner: "t", SignalCap: 100})
	if err != nil || len(got) != batch {
		t.Fatalf("claimed %d rows (%v), want %d", len(got), err, batch)
	}
	ids := make([]int64, len(got))
	for i, c := range got {
		ids[i] = c.ID
	}
	n, err := db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE id = ANY($1) AND concurrency_key = $2`, ids, head)
	if err != nil || n != 0 {
		t.Fatalf("the pick claimed %d rows of key %s while it is executing (%v)", n, head, err)
	}
	t.Logf("built and measured in %s", time.Since(started).Round(time.Millisecond))
}
