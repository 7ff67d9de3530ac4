package pg_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// fairQueue makes queue fair on db with handler h registered.
func fairQueue(t *testing.T, db *pg.DB, queue string) {
	t.Helper()
	ctx := context.Background()
	if _, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://example.test/", NewSecret: "whsec_x"}); err != nil {
		t.Fatal(err)
	}
	rr := pg.FairnessRoundRobin
	if _, err := db.QueueUpsert(ctx, pg.QueueUpsert{Name: queue, Fairness: &rr}); err != nil {
		t.Fatal(err)
	}
}

// insertFor inserts n jobs of key into queue (key nil: none).
func insertFor(t *testing.T, db *pg.DB, queue string, key *string, n int) {
	t.Helper()
	jobs := make([]pg.JobInsert, n)
	for i := range jobs {
		jobs[i] = pg.JobInsert{Queue: queue, Handler: "h", FairnessKey: key}
	}
	if _, err := db.JobInsertMany(context.Background(), jobs); err != nil {
		t.Fatal(err)
	}
}

// claimedKeys claims up to limit steps fairly and counts them per fairness key.
func claimedKeys(t *testing.T, db *pg.DB, queue string, limit, slots int, owner string) map[string]int {
	t.Helper()
	return claimedKeysOwning(t, db, queue, limit, slots, owner, nil)
}

// claimedKeysOwning is claimedKeys for a process that runs own steps of each key.
func claimedKeysOwning(t *testing.T, db *pg.DB, queue string, limit, slots int, owner string, own map[string]int) map[string]int {
	t.Helper()
	claimed, err := db.JobClaimFair(context.Background(), pg.FairClaimParams{Slots: slots, Own: own,
		JobClaimParams: pg.JobClaimParams{Queue: queue, Limit: limit, LeaseTTL: time.Minute, Owner: owner, SignalCap: 100}})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, c := range claimed {
		j, err := db.JobGet(context.Background(), c.ID)
		if err != nil || j.FairnessKey == nil || j.Status != "executing" || c.FairnessKey == nil || *c.FairnessKey != *j.FairnessKey {
			t.Fatalf("claimed job %d: %+v, %v", c.ID, j, err)
		}
		out[*j.FairnessKey]++
	}
	return out
}

// A fair claim gives every key with work its turn: a backlog of one key does not hold
// back the others, a key's weight is its share, and the round robin goes on where it
// stopped from one claim to the next (the key a batch ends in keeps the rest of its turn).
func TestFairClaimTakesTurnsByWeight(t *testing.T) {
	pgtest.SkipOnCitus(t, "its keys are on different shards there, which take turns by the weights they hold "+
		"(docs/citus.md, \"Fair share\"; TestFairShareAcrossThreeServers holds 3:1 on Citus)")
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	fairQueue(t, db, "fair")
	insertFor(t, db, "fair", str("a"), 1000)
	insertFor(t, db, "fair", str("b"), 10)
	insertFor(t, db, "fair", str("c"), 10)
	insertFor(t, db, "fair", nil, 3) // the default key ""
	// Four keys, weight 1 each: 10 rows are 3 rounds cut short, in key order ("" first):
	// c's turn is cut after 1 row, and it keeps 2 for the next claim.
	got := claimedKeys(t, db, "fair", 10, 1000, "p1")
	if want := map[string]int{"": 3, "a": 3, "b": 3, "c": 1}; !maps.Equal(got, want) {
		t.Fatalf("first claim per key: %v; want %v", got, want)
	}
	if got = claimedKeys(t, db, "fair", 2, 1000, "p1"); !maps.Equal(got, map[string]int{"c": 2}) {
		t.Fatalf("the next claim took %v; want c's 2 rows left of its turn", got)
	}

	// Weights 3:1: every claim of 8 gives 6 and 2, and claims of one row go a, a, a, b.
	fairQueue(t, db, "weighted")
	insertFor(t, db, "weighted", str("a"), 200)
	insertFor(t, db, "weighted", str("b"), 200)
	if _, err := db.FairnessKeyPut(ctx, "weighted", "a", ptr(3), nil); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if got := claimedKeys(t, db, "weighted", 8, 1000, "p1"); !maps.Equal(got, map[string]int{"a": 6, "b": 2}) {
			t.Fatalf("weighted claim of 8: %v; want a 6, b 2", got)
		}
	}
	seq := ""
	for range 8 {
		for k := range claimedKeys(t, db, "weighted", 1, 1000, "p1") {
			seq += k
		}
	}
	if seq != "aaabaaab" {
		t.Fatalf("claims of one row took keys in the order %s; want aaabaaab", seq)
	}
}

// A key's cap holds across processes (every process's executing steps count), and a key
// holds at most its share of one process's slots while other keys have work.
func TestFairClaimHoldsCapsAndShares(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	fairQueue(t, db, "fair")
	insertFor(t, db, "fair", str("a"), 100)
	insertFor(t, db, "fair", str("b"), 100)
	if _, err := db.FairnessKeyPut(ctx, "fair", "a", nil, ptr(3)); err != nil {
		t.Fatal(err)
	}
	total := map[string]int{}
	for _, owner := range []string{"p1", "p2", "p3"} {
		for k, n := range claimedKeys(t, db, "fair", 50, 1000, owner) {
			total[k] += n
		}
	}
	if total["a"] != 3 {
		t.Fatalf("a capped at 3 took %d over three processes", total["a"])
	}
	// Shares: 10 slots, two keys with work → at most 5 each in flight for this process.
	insertFor(t, db, "fair", str("x"), 100)
	insertFor(t, db, "fair", str("y"), 100)
	if _, err := db.Exec(ctx, `UPDATE jobs SET status = 'runnable', lease_token = NULL, lease_expires_at = NULL, lease_owner = NULL
		WHERE status = 'executing'`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `UPDATE jobs SET status = 'done', finished_at = now() WHERE fairness_key IN ('a', 'b')`); err != nil {
		t.Fatal(err)
	}
	db.WarmShards("fair")
	first := claimedKeys(t, db, "fair", 50, 10, "p4")
	if first["x"] != 5 || first["y"] != 5 {
		t.Fatalf("two keys, 10 slots: %v; want 5 each", first)
	}
	db.WarmShards("fair")
	if again := claimedKeysOwning(t, db, "fair", 50, 10, "p4", first); len(again) != 0 {
		t.Fatalf("with both shares in flight the claim took %v", again)
	}
	db.WarmShards("fair") // (on Citus: as an outcome of the steps of x and y would)
	if again := claimedKeysOwning(t, db, "fair", 50, 10, "p4", map[string]int{"x": 5, "y": 2}); !maps.Equal(again, map[string]int{"y": 3}) {
		t.Fatalf("with x's share and 2 of y's in flight the claim took %v; want y 3", again)
	}
}

// The fair claim reads O(batch) rows however many keys there are: with 10 000 keys of
// which 10 have work, and with 10 000 keys that all have work, a claim of 50 reads at
// most 2 × 50 rows of jobs in any plan node, under generic and custom plans, and never
// reads an idle key (an idle key has no entry in jobs_fair_pick).
func TestFairPickReadsOnlyWhatItTakes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 200 000-row jobs table")
	}
	pgtest.SkipOnCitus(t, "it EXPLAINs the plain statement over one table (the Citus claim is held to one task by "+
		"TestCitusHotStatementsAreRouterQueries)")
	t.Parallel()
	ctx := context.Background()
	db := pgtest.Open(t, pgtest.NewDatabase(t), pg.Options{MaxConns: 1})
	must := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%v\n%s", err, sql)
		}
	}
	must(`INSERT INTO handlers (name, url, secret) VALUES ('h', 'http://example.test/', 'whsec_x')`)
	must(`INSERT INTO queues (name, fairness) VALUES ('few', 'round_robin'), ('all', 'round_robin')`)
	// few: 10 000 keys with settings and finished work, 10 of them with 5 000 runnable jobs each
	must(`INSERT INTO fairness_keys (queue, key, weight) SELECT 'few', 't' || i, 1 + i % 3 FROM generate_series(1, 10000) i`)
	must(`INSERT INTO jobs (queue, handler, fairness_key, status, finished_at, max_attempts)
		SELECT 'few', 'h', 't' || (i % 10000), 'done', now(), 5 FROM generate_series(1, 50000) i`)
	must(`INSERT INTO jobs (queue, handler, fairness_key, priority, eligible_at, max_attempts)
		SELECT 'few', 'h', 't' || (1 + i % 10) * 1000, (i % 3)::smallint, now() - (i % 1000) * interval '1 ms', 5
		FROM generate_series(1, 50000) i`)
	// all: 10 000 keys with 10 runnable jobs each, and a few not yet due
	must(`INSERT INTO jobs (queue, handler, fairness_key, priority, eligible_at, max_attempts)
		SELECT 'all', 'h', 't' || (i % 10000), 5, now() - interval '1 minute' + (i % 7 = 0)::int * interval '1 hour', 5
		FROM generate_series(1, 100000) i`)
	must(`VACUUM ANALYZE jobs`)
	must(`PREPARE fair(text, int, int, text[], int[], bigint, text, bigint) AS ` + pg.Statement("JobClaimFair"))
	for _, mode := range []string{"generic", "custom"} {
		must("SET plan_cache_mode = force_" + mode + "_plan")
		for _, queue := range []string{"few", "all"} {
			var raw []byte
			var err error
			for range 2 { // the second, warm run counts
				raw, err = db.ExplainAnalyze(ctx, fmt.Sprintf("EXECUTE fair('%s', 50, 1000, '{}', '{}', 30000, 'explain', 100)", queue))
				if err != nil {
					t.Fatal(err)
				}
			}
			plan, err := pgtest.ParsePlan(raw)
			if err != nil {
				t.Fatal(err)
			}
			var top []struct {
				Plan keyedPlan `json:"Plan"`
			}
			if err := json.Unmarshal(raw, &top); err != nil {
				t.Fatal(err)
			}
			read, where := plan.LargestRead()
			jobsRead := plan.MaxRowsRead("jobs")
			buffers := top[0].Plan.SharedHit + top[0].Plan.SharedRead
			t.Logf("%s plan, queue %s: claimed %.0f, most rows of jobs one node read %.0f, largest read %.0f (%s), %d buffers",
				mode, queue, plan.ActualRows, jobsRead, read, where, buffers)
			if plan.ActualRows != 50 {
				t.Errorf("%s plan, queue %s: claimed %.0f of 50:\n%s", mode, queue, plan.ActualRows, raw)
			}
			if jobsRead > 2*50 || read > 2*50 {
				t.Errorf("%s plan, queue %s: a node read %.0f rows of jobs, %.0f in all at %s (want at most 100):\n%s",
					mode, queue, jobsRead, read, where, raw)
			}
			if plan.HasSeqScan("jobs") || plan.HasSeqScan("fairness_keys") {
				t.Errorf("%s plan, queue %s: a sequential scan:\n%s", mode, queue, raw)
			}
		}
	}
}

// gendurable_enqueue takes a fairness_key as POST /v1/jobs does: kept as given, ” in a
// fair queue when none is given (so the fair claim takes the job), no key elsewhere for
// ”; a key over 512 bytes and a rate limit in a fair queue are refused, writing nothing.
func TestSQLEnqueueFairnessKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	fairQueue(t, db, "fair")
	if _, err := db.RateLimitUpsert(ctx, "tight", 1, 2); err != nil {
		t.Fatal(err)
	}
	enqueue := func(options string) (int64, error) {
		return db.QueryInt(ctx, `SELECT gendurable_enqueue('h', '{}', $1::jsonb)`, options)
	}
	for _, c := range []struct {
		options string
		want    *string // the job's fairness_key
	}{
		{`{"queue": "fair", "fairness_key": "tenant-1"}`, str("tenant-1")},
		{`{"queue": "fair"}`, str("")},
		{`{"queue": "fair", "fairness_key": ""}`, str("")},
		{`{"queue": "plain", "fairness_key": "tenant-1"}`, str("tenant-1")},
		{`{"queue": "plain", "fairness_key": ""}`, nil},
		{`{"queue": "plain"}`, nil},
	} {
		id, err := enqueue(c.options)
		if err != nil {
			t.Fatalf("%s: %v", c.options, err)
		}
		j, err := db.JobGet(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if (j.FairnessKey == nil) != (c.want == nil) || c.want != nil && *j.FairnessKey != *c.want {
			t.Fatalf("%s: the job's fairness_key is %v, want %v", c.options, j.FairnessKey, c.want)
		}
	}
	if got := claimedKeys(t, db, "fair", 10, 10, "p1"); !maps.Equal(got, map[string]int{"": 2, "tenant-1": 1}) {
		t.Fatalf("the fair claim took %v; want the three jobs enqueued by SQL", got)
	}
	before, err := db.QueryInt(ctx, `SELECT count(*) FROM jobs`)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ options, field, message string }{
		{`{"queue": "fair", "fairness_key": "` + strings.Repeat("k", 513) + `"}`, "fairness_key", "must be at most 512 bytes"},
		{`{"queue": "fair", "fairness_key": 7}`, "fairness_key", "must be a string"},
		{`{"queue": "fair", "rate_limit": {"name": "tight"}}`, "rate_limit", `queue "fair" is fair`},
		{`{"queue": "fair", "rate_limits": [{"name": "tight"}]}`, "rate_limits", "cap the fairness key instead"},
	} {
		_, err := enqueue(c.options)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "22023" || pgErr.ColumnName != c.field || !strings.Contains(pgErr.Message, c.message) {
			t.Errorf("%.60s: got %v; want 22023 on %s containing %q", c.options, err, c.field, c.message)
		}
	}
	if after, err := db.QueryInt(ctx, `SELECT count(*) FROM jobs`); err != nil || after != before {
		t.Fatalf("refused calls wrote %d jobs (%v)", after-before, err)
	}
}

// Turning a queue fair gives its live jobs without a key the default key "", so the fair
// claim takes them (it reads only keyed jobs), and so does a retry or a replay of a job
// that ended before (without it, they stayed runnable and were never claimed). On Citus
// they stay where they were.
func TestFairClaimTakesTheJobsOfBeforeTheQueueWasFair(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	if _, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://example.test/", NewSecret: "whsec_x"}); err != nil {
		t.Fatal(err)
	}
	for range 3 { // three batches: on Citus, three shards
		insertFor(t, db, "late", nil, 2)
	}
	insertFor(t, db, "late", str("acme"), 2)
	// and two jobs that ended before: a retry and a replay make them live again
	ended, err := db.JobInsertMany(ctx, []pg.JobInsert{{Queue: "late", Handler: "h"}, {Queue: "late", Handler: "h"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range ended {
		if _, _, err := db.JobCancel(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
	}
	fairQueue(t, db, "late")
	if err := db.JobRetry(ctx, ended[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := db.JobReplay(ctx, ended[1].ID, 0, nil); err != nil {
		t.Fatal(err)
	}
	keyless, err := db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE queue = 'late' AND fairness_key IS NULL`)
	if err != nil || keyless != 0 {
		t.Fatalf("%d live jobs of the queue made fair have no key (%v)", keyless, err)
	}
	db.WarmShards("late")
	if got := claimedKeys(t, db, "late", 20, 20, "p1"); !maps.Equal(got, map[string]int{"": 8, "acme": 2}) {
		t.Fatalf("the fair claim took %v; want the 8 jobs of before with the default key (6 live, 2 revived) and acme's 2", got)
	}
}
