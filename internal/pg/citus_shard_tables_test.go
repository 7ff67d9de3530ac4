package pg_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/dbcitus"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// A statement on a shard's tables names each table by its shard: only unqualified
// identifiers that name a table, never a column (j.queue), a string literal, a quoted
// identifier or a comment.
func TestRewriteTablesNamesTheShardsRelations(t *testing.T) {
	t.Parallel()
	names := map[string]string{"jobs": "jobs_102008", "queues": "queues_102001", "steps": "steps_102040"}
	cases := []struct{ in, want string }{
		{`SELECT j.id FROM jobs j WHERE j.queue = 'jobs'`, `SELECT j.id FROM jobs_102008 j WHERE j.queue = 'jobs'`},
		{`INSERT INTO steps (job_id) SELECT id FROM jobs`, `INSERT INTO steps_102040 (job_id) SELECT id FROM jobs_102008`},
		{`UPDATE jobs SET x = 1 -- jobs here
FROM queues q WHERE q.jobs = 1 /* queues */`, `UPDATE jobs_102008 SET x = 1 -- jobs here
FROM queues_102001 q WHERE q.jobs = 1 /* queues */`},
		{`SELECT "jobs".id, 'it''s jobs', $1::int FROM JOBS`, `SELECT "jobs".id, 'it''s jobs', $1::int FROM jobs_102008`},
		{`SELECT $$jobs$$, jobs_pick, myjobs FROM jobs`, `SELECT $$jobs$$, jobs_pick, myjobs FROM jobs_102008`},
		{`SELECT 1 FROM public . jobs`, `SELECT 1 FROM public . jobs`}, // qualified: left alone (none is)
	}
	for _, c := range cases {
		if got := pg.RewriteTables(c.in, names); got != c.want {
			t.Errorf("rewrite of %q:\n got %q\nwant %q", c.in, got, c.want)
		}
	}
}

// Each statement a server runs on one shard's tables (CitusRouteShards) is a plain
// PostgreSQL statement on the worker: its plan has no Citus node and reads no relation of
// another shard, and it writes no reference table (whose writes must reach every node).
// Run through the server's own path, guard included.
func TestCitusShardStatementsRunOnTheShardTables(t *testing.T) {
	t.Parallel()
	citusOnly(t)
	db := pgtest.Open(t, pgtest.NewDatabase(t), pg.Options{CitusRoute: pg.CitusRouteShards})
	ctx := context.Background()
	if kind, err := db.CitusShardQuerier(ctx, 0); err != nil || kind != "shard tables" {
		t.Fatalf("shard 0's statements run on %q (%v), want the shard tables", kind, err)
	}
	names, err := db.CitusShardTableNames(ctx, 0)
	if err != nil || names == nil {
		t.Fatalf("shard 0's table names: %v (%v)", names, err)
	}
	for _, table := range []string{"jobs", "signals", "steps", "idempotency_keys", "rate_buckets", "handlers", "queues", "gates", "rate_limits"} {
		if !regexp.MustCompile(`^` + table + `_\d+$`).MatchString(names[table]) {
			t.Errorf("table %s on shard 0: %q, want %s_<shard id>", table, names[table], table)
		}
	}
	reference := map[string]bool{}
	for _, table := range []string{"handlers", "queues", "gates", "gate_slots", "rate_limits", "schedules", "api_keys",
		"placement_layout", "fairness_keys"} {
		reference[names[table]] = true
	}
	placements, err := pg.CitusShardPlacements(ctx, db, 0)
	if err != nil {
		t.Fatal(err)
	}
	statements := citusShardStatements(placements)
	relation := regexp.MustCompile(`\bon ([a-z_]+_\d{6,})\b`) // a shard's relation: its name, then the shard id
	written := regexp.MustCompile(`(?i)\b(?:insert\s+into|update|delete\s+from)\s+([a-z_]+_\d{6,})\b`)
	for _, s := range statements {
		rows, err := db.QueryShardStrings(ctx, 0, "EXPLAIN "+s.sql, s.args...)
		if err != nil {
			t.Errorf("%s on shard 0's tables: %v", s.name, err)
			continue
		}
		var plan strings.Builder
		for _, r := range rows {
			plan.WriteString(r[0] + "\n")
		}
		if strings.Contains(plan.String(), "Citus") {
			t.Errorf("%s on shard 0's tables is planned by Citus:\n%s", s.name, plan.String())
		}
		for _, m := range relation.FindAllStringSubmatch(plan.String(), -1) {
			rel := m[1]
			// the history's partitions are the steps shard's own
			if table := rel[:strings.LastIndexByte(rel, '_')]; !reference[rel] && names[table] != rel && !strings.HasPrefix(rel, "steps_") {
				t.Errorf("%s on shard 0's tables reads %s, not a relation of shard 0:\n%s", s.name, rel, plan.String())
			}
		}
		for _, m := range written.FindAllStringSubmatch(pg.RewriteTables(s.sql, names), -1) {
			if reference[m[1]] {
				t.Errorf("%s writes the reference table %s on one node", s.name, m[1])
			}
		}
	}
}

// A shard moved to another worker after the layout was read: its statements, sent to its
// old worker's copy of the tables, are refused there before they write anything
// (gendurable_shard_here, or the copy already dropped), run through the coordinator
// instead, and the layout is read again: the next ones go to the new worker's tables.
func TestCitusShardMovedAwayIsServedWhereItIsNow(t *testing.T) {
	t.Parallel()
	citusOnly(t)
	db := pgtest.Open(t, pgtest.NewDatabase(t), pg.Options{CitusRoute: pg.CitusRouteShards})
	ctx := context.Background()
	if _, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://example.test/", NewSecret: "whsec_x"}); err != nil {
		t.Fatal(err)
	}
	placements, err := pg.CitusShardPlacements(ctx, db, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Two jobs on shard 0, at its first placement (an id carries its placement).
	if _, err := db.Exec(ctx, `INSERT INTO jobs (id, placement, queue, handler, max_attempts) VALUES ($1, $2, 'q', 'h', 5), ($3, $2, 'q', 'h', 5)`,
		int64(1_000_000*1024+placements[0]), placements[0], int64(1_000_001*1024+placements[0])); err != nil {
		t.Fatal(err)
	}
	before, err := db.QueryStrings(ctx, `SELECT s.shardid::text, p.nodeport::text,
			(SELECT n.nodeport FROM pg_dist_node n WHERE n.groupid > 0 AND n.nodeport <> p.nodeport AND n.isactive LIMIT 1)::text
		FROM pg_dist_shard s JOIN pg_dist_shard_placement p USING (shardid)
		WHERE s.logicalrelid = 'jobs'::regclass AND s.shardid = get_shard_id_for_distribution_column('jobs', $1::int)`, placements[0])
	if err != nil || len(before) != 1 {
		t.Fatalf("shard 0's node: %v (%v)", before, err)
	}
	shard, from, to := before[0][0], before[0][1], before[0][2]
	claim := func() int {
		t.Helper()
		claimed, err := db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: "q", Limit: 1, LeaseTTL: time.Minute, Owner: "t", SignalCap: 100})
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		return len(claimed)
	}
	if n := claim(); n != 1 {
		t.Fatalf("claimed %d before the move, want 1", n)
	}
	if _, err := db.Exec(ctx, `SELECT citus_move_shard_placement($1::bigint, '127.0.0.1', $2::int, '127.0.0.1', $3::int,
			shard_transfer_mode => 'block_writes')`, shard, from, to); err != nil {
		t.Fatalf("move shard %s from %s to %s: %v", shard, from, to, err)
	}
	if n := claim(); n != 1 {
		t.Fatalf("claimed %d after the move with the layout read before it, want 1", n)
	}
	if n := db.CitusShardsMovedAway(); n != 1 {
		t.Fatalf("%d statements refused on the old worker's tables, want the claim's 1", n)
	}
	if kind, err := db.CitusShardQuerier(ctx, 0); err != nil || kind != "shard tables" {
		t.Fatalf("shard 0's statements after the move run on %q (%v), want its new worker's tables", kind, err)
	}
	rows, err := db.QueryShardStrings(ctx, 0, `SELECT inet_server_port()::text, count(*)::text FROM jobs WHERE status = 'executing'`)
	if err != nil || len(rows) != 1 || rows[0][0] != to || rows[0][1] != "2" {
		t.Fatalf("on shard 0's tables after the move: %v (%v), want port %s and the 2 claimed jobs", rows, err, to)
	}
}

// citusStatement is a statement of the Citus dialect with arguments for EXPLAIN.
type citusStatement struct {
	name string
	sql  string
	args []any
}

// citusShardStatements are the statements the server runs on one shard (placements, the
// shard's): the step path's claim, outcomes, leases, parks and reaps, with arguments for
// EXPLAIN (a job id at the shard's first placement).
func citusShardStatements(placements []int) []citusStatement {
	ids, tokens := []int64{int64(1024 + placements[0])}, []string{"00000000-0000-0000-0000-000000000000"}
	texts := func(s ...string) []string { return s }
	ints := func(v ...int) []int { return v }
	var none *time.Time
	return []citusStatement{
		{"JobClaim", dbcitus.JobClaim, []any{"nonce", int64(30000), "owner", int64(100), placements, "default", 50}},
		{"JobApplyPlainOutcomes", dbcitus.JobApplyPlainOutcomes, []any{ids, tokens, texts("done"), texts("done"), ints(1), ints(200),
			texts(""), []int64{0}, texts(""), placements}},
		{"JobApplyOutcomes", dbcitus.JobApplyOutcomes, []any{`[{"id": 1, "token": "00000000-0000-0000-0000-000000000000", "kind": "await", "label": "await"}]`, placements}},
		{"StepInsertApplied", pg.CitusWithPlacements(dbcitus.StepInsertApplied, 8, placements), []any{ids, tokens, texts("done"),
			texts("done"), ints(200), texts(""), texts("")}},
		{"JobInsertChildren", pg.CitusWithPlacements(dbcitus.JobInsertChildren, 16, placements), []any{ids, tokens, []int64{5},
			texts("default"), texts("h"), texts(""), texts(""), ints(-1), []time.Time{{}}, []int64{0}, texts(""), ints(0), texts(""),
			[]*string{nil}, []*string{nil}}},
		{"LeaseExtendMany", dbcitus.LeaseExtendMany, []any{placements, ids, tokens, int64(30000)}},
		{"LeaseReleaseMany", dbcitus.LeaseReleaseMany, []any{placements, ids, tokens, []int64{1000}}},
		// a remote bucket's debit, and its refund (citusTakeRemoteBuckets)
		{"RateBucketTake", dbcitus.RateBucketTake, []any{placements[0], "api", "", ints(1, 2)}},
		{"RateBucketRefund", dbcitus.RateBucketRefund, []any{2.0, placements[0], "api", ""}},
		{"LeaseGetBackoffs", dbcitus.LeaseGetBackoffs, []any{ids, tokens, placements}},
		{"JobListExpiredLeases", dbcitus.JobListExpiredLeases, []any{placements, none, 100}},
		{"JobReapExpiredLeases", dbcitus.JobReapExpiredLeases, []any{ids, tokens, []int64{1000}, placements, none}},
		{"JobWakeExpiredAwaits", dbcitus.JobWakeExpiredAwaits, []any{placements, none, 100}},
		{"LeaseParkMany", dbcitus.LeaseParkMany, []any{placements, ids, tokens, []time.Time{{}}}},
		// a fair queue's claim: its position's lock, then the claim (citusClaimFair)
		{"FairPositionLock", dbcitus.FairPositionLock, []any{placements[0], "default"}},
		{"JobClaimFair", dbcitus.JobClaimFair, []any{"nonce", int64(30000), "owner", int64(100), placements, "default", 50,
			texts("acme"), 2, true, 10, ints(2)}},
	}
}
