package pg_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// TestWritePerformancePlans seeds 1 000 000 jobs (300 000 runnable, 5 000 executing,
// 695 000 finished) and 50 000 signals, and writes the EXPLAIN (ANALYZE, BUFFERS) plan
// of every hot statement to $GENDURABLE_EXPLAIN_OUT, for docs/performance.md.
//
//	GENDURABLE_EXPLAIN_OUT=/tmp/plans.txt go test -run TestWritePerformancePlans ./internal/pg/
func TestWritePerformancePlans(t *testing.T) {
	out := os.Getenv("GENDURABLE_EXPLAIN_OUT")
	if out == "" {
		t.Skip("set GENDURABLE_EXPLAIN_OUT to write the plans")
	}
	ctx := context.Background()
	db := pgtest.Open(t, pgtest.NewDatabase(t), pg.Options{MaxConns: 1})
	must := func(sql string, args ...any) {
		if _, err := db.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%v\n%s", err, sql)
		}
	}
	must(`INSERT INTO handlers (name, url, secret) VALUES ('h', 'http://example.test/', 'whsec_eA==')`)
	must(`INSERT INTO queues (name) VALUES ('default'), ('other')`)
	must(`INSERT INTO jobs (queue, handler, max_attempts, status, finished_at)
		SELECT 'default', 'h', 5, (ARRAY['done','failed','cancelled'])[1 + i % 3], now() - i * interval '1 second'
		FROM generate_series(1, 695000) i`)
	must(`INSERT INTO jobs (queue, handler, max_attempts, priority, eligible_at)
		SELECT CASE WHEN i % 4 = 0 THEN 'other' ELSE 'default' END, 'h', 5, (i % 10)::smallint, now() - (i % 1000) * interval '1 second'
		FROM generate_series(1, 300000) i`)
	must(`INSERT INTO jobs (queue, handler, max_attempts, status, attempt, lease_token, lease_expires_at, attempted_at, claim_inbox_seq)
		SELECT 'default', 'h', 5, 'executing', 1, gen_random_uuid(), now() + interval '30 seconds', now(), 0
		FROM generate_series(1, 5000) i`)
	must(`INSERT INTO signals (job_id, seq, name, payload)
		SELECT id, 1, 'approved', '{}' FROM jobs WHERE status = 'runnable' ORDER BY id LIMIT 50000`)
	must(`UPDATE jobs SET inbox_seq = 1 WHERE id IN (SELECT job_id FROM signals)`)
	must(`VACUUM ANALYZE`)

	var b strings.Builder
	explain := func(title, sql string, args ...any) {
		// Twice: the second (warm) run is the one shown.
		for range 2 {
			rows, err := db.QueryStrings(ctx, "BEGIN")
			_ = rows
			if err != nil {
				t.Fatal(err)
			}
			plan, err := db.QueryStrings(ctx, "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) "+sql, args...)
			if _, rerr := db.QueryStrings(ctx, "ROLLBACK"); rerr != nil {
				t.Fatal(rerr)
			}
			if err != nil {
				t.Fatalf("%s: %v", title, err)
			}
			b.Reset()
			fmt.Fprintf(&b, "### %s\n\n```\n", title)
			for _, r := range plan {
				b.WriteString(r[0] + "\n")
			}
			b.WriteString("```\n\n")
		}
		f, err := os.OpenFile(out, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = f.WriteString(b.String())
		f.Close()
	}
	_ = os.Remove(out)
	explain("JobClaimBatch (pick, batch 50, queue of 225 000 runnable)", pg.Statement("JobClaimBatch"), "default", 50, int64(30000), "explain", 100)
	claimed, err := db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: "default", Limit: 50, LeaseTTL: time.Minute, Owner: "x", SignalCap: 100})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, len(claimed))
	recs := make([]pg.OutcomeRecord, len(claimed))
	leases := make([]string, len(claimed))
	windows := []pg.InboxWindow{}
	for i, c := range claimed {
		ids[i] = c.ID
		recs[i] = pg.OutcomeRecord{ID: c.ID, Token: c.LeaseToken, Kind: pg.KindNext, Label: "next"}
		leases[i] = c.LeaseToken
		windows = append(windows, pg.InboxWindow{JobID: c.ID, After: 0, Upto: 1})
	}
	explain("JobApplyOutcomes (a batch of 50 next outcomes)", pg.Statement("JobApplyOutcomes"), pg.OutcomeArgs(recs)...)
	explain("LeaseExtendMany (heartbeat of 50 leases)", pg.Statement("LeaseExtendMany"), ids, leases, int64(30000))
	after := make([]int64, len(windows))
	upto := make([]int64, len(windows))
	for i := range windows {
		upto[i] = 1
	}
	explain("SignalLoadInboxes (inboxes of a claimed batch of 50)", pg.Statement("SignalLoadInboxes"), ids, after, upto)
	explain("SignalDeliver (by id)", pg.Statement("SignalDeliver"), ids[0], nil, "approved", []byte(`{"by":"ana"}`))
	explain("JobInsertMany (one job)", pg.Statement("JobInsertMany"),
		pg.InsertArgs([]pg.JobInsert{{Queue: "default", Handler: "h", Input: json.RawMessage(`{"n":1}`)}})...)
	explain("JobListExpiredLeases (the reaper's steady state: nothing expired, 5 000 executing)", pg.Statement("JobListExpiredLeases"), nil, 1000)
	explain("JobWakeExpiredAwaits (nothing due)", pg.Statement("JobWakeExpiredAwaits"), nil, 1000)
	week := int64((7 * 24 * time.Hour).Milliseconds())
	explain("JobGCSelect (1 000 of 695 000 finished)", pg.Statement("JobGCSelect"), week, 1000)
	gcIDs, err := db.JobGCSelect(ctx, 7*24*time.Hour, 1000)
	if err != nil {
		t.Fatal(err)
	}
	explain("JobGCDelete (1 000 ids)", pg.Statement("JobGCDelete"), gcIDs)
	must("SET plan_cache_mode = force_generic_plan")
	must("PREPARE pick(text, int, bigint, text, int) AS " + pg.Statement("JobClaimBatch"))
	plan, err := db.QueryStrings(ctx, "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE pick('default', 50, 30000, 'explain', 100)")
	if err != nil {
		t.Fatal(err)
	}
	f0, _ := os.OpenFile(out, os.O_APPEND|os.O_WRONLY, 0o644)
	fmt.Fprintf(f0, "### JobClaimBatch, generic plan (a prepared statement after its first executions)\n\n```\n")
	for _, r := range plan {
		fmt.Fprintln(f0, r[0])
	}
	fmt.Fprintf(f0, "```\n\n")
	f0.Close()
	must("RESET plan_cache_mode")
	// The pick's own wall time, without EXPLAIN's instrumentation: median of 100 picks of 50.
	var took []time.Duration
	for range 100 {
		started := time.Now()
		got, err := db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: "default", Limit: 50, LeaseTTL: time.Minute, Owner: "x", SignalCap: 100})
		if err != nil || len(got) != 50 {
			t.Fatalf("pick: %d rows, %v", len(got), err)
		}
		took = append(took, time.Since(started))
		if len(took) <= 5 || len(took)%20 == 0 {
			t.Logf("pick %d: %s", len(took), took[len(took)-1])
		}
	}
	slices.Sort(took)
	f, _ := os.OpenFile(out, os.O_APPEND|os.O_WRONLY, 0o644)
	fmt.Fprintf(f, "Pick of 50 at 1 000 000 rows, wall time seen by the client over 100 picks: median %s, p90 %s.\n",
		took[50].Round(10*time.Microsecond), took[90].Round(10*time.Microsecond))
	f.Close()
	t.Logf("plans written to %s; pick median %s", out, took[50])
}
