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

// The reaper's two statements: the list reads only leases expired at its clock, with
// each step's attempt and handler settings; the take-back applies the delay it is given
// and is fenced by token and expiry, so a lease that was extended, or given to another
// token, between the two is left alone.
func TestReapIsFencedByTokenAndExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	base, ceiling := 2000, 9000
	if _, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://example.test/", NewSecret: "whsec_x",
		BackoffBaseMS: &base, BackoffMaxMS: &ceiling}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.JobInsertMany(ctx, []pg.JobInsert{{Queue: "q", Handler: "h"}, {Queue: "q", Handler: "h"}, {Queue: "q", Handler: "h"}}); err != nil {
		t.Fatal(err)
	}
	claimed, err := db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: "q", Limit: 10, LeaseTTL: time.Hour, Owner: "t", SignalCap: 100})
	if err != nil || len(claimed) != 3 {
		t.Fatalf("claim: %d, %v", len(claimed), err)
	}
	if got, err := db.JobListExpiredLeases(ctx, 10, nil); err != nil || len(got) != 0 {
		t.Fatalf("listed %d leases with an hour left (%v)", len(got), err)
	}
	ahead := time.Now().Add(2 * time.Hour)
	expired, err := db.JobListExpiredLeases(ctx, 10, &ahead)
	if err != nil || len(expired) != 3 {
		t.Fatalf("listed %d of 3 leases two hours ahead (%v)", len(expired), err)
	}
	if limited, err := db.JobListExpiredLeases(ctx, 2, &ahead); err != nil || len(limited) != 2 {
		t.Fatalf("listed %d with a limit of 2 (%v)", len(limited), err)
	}
	for _, x := range expired {
		if x.Attempt != 1 || x.BackoffBaseMS == nil || *x.BackoffBaseMS != base || *x.BackoffMaxMS != ceiling || x.Token == "" {
			t.Fatalf("listed %+v", x)
		}
	}
	// Judged by the real clock the leases are not expired: nothing is taken back.
	reaps := []pg.LeaseReap{{Lease: expired[0].Lease, Delay: 1234 * time.Millisecond}}
	if got, err := db.JobReapExpiredLeases(ctx, reaps, nil); err != nil || len(got) != 0 {
		t.Fatalf("took back %d leases that have an hour left (%v)", len(got), err)
	}
	// A token that is not the lease's current one takes nothing back.
	stale := []pg.LeaseReap{{Lease: pg.Lease{JobID: expired[1].JobID, Token: expired[0].Token}, Delay: time.Second}}
	if got, err := db.JobReapExpiredLeases(ctx, stale, &ahead); err != nil || len(got) != 0 {
		t.Fatalf("took back %d leases by another step's token (%v)", len(got), err)
	}
	got, err := db.JobReapExpiredLeases(ctx, reaps, &ahead)
	if err != nil || len(got) != 1 || got[0].JobID != expired[0].JobID || got[0].Status != "runnable" {
		t.Fatalf("take-back: %+v, %v", got, err)
	}
	j, err := db.JobGet(ctx, expired[0].JobID)
	if err != nil {
		t.Fatal(err)
	}
	if j.EligibleAt == nil || j.EligibleAt.Sub(j.UpdatedAt) != 1234*time.Millisecond || j.LeaseExpiresAt != nil {
		t.Fatalf("after the take-back: eligible %v updated %v lease until %v", j.EligibleAt, j.UpdatedAt, j.LeaseExpiresAt)
	}
	// Taken back once: the same lease again changes nothing.
	if again, err := db.JobReapExpiredLeases(ctx, reaps, &ahead); err != nil || len(again) != 0 {
		t.Fatalf("took the same lease back twice: %+v, %v", again, err)
	}
}

// The reaper's cost follows what expired, not the table: with 20 000 steps in flight and
// 30 000 runnable, listing a batch of 50 expired leases reads them off jobs_lease, and
// taking them back reads them by primary key, under the custom plan and the generic one
// (what a prepared statement settles on after its first executions).
func TestReapReadsOnlyWhatExpired(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.Open(t, pgtest.NewDatabase(t), pg.Options{MaxConns: 1}) // one session for the PREPAREs
	seedJobs(t, db, "q", 30_000, "")
	if _, err := db.Exec(ctx, `
		INSERT INTO jobs (queue, handler, max_attempts, status, attempt, lease_token, lease_expires_at, attempted_at, claim_inbox_seq)
		SELECT 'q', 'h', 5, 'executing', 1, gen_random_uuid(),
		       now() + CASE WHEN i <= 100 THEN -i ELSE i END * interval '1 second', now(), 0
		FROM generate_series(1, 20000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `VACUUM ANALYZE jobs`); err != nil {
		t.Fatal(err)
	}
	expired, err := db.JobListExpiredLeases(ctx, 50, nil)
	if err != nil || len(expired) != 50 {
		t.Fatalf("listed %d (%v)", len(expired), err)
	}
	ids, tokens, delays := make([]string, 50), make([]string, 50), make([]string, 50)
	for i, x := range expired {
		ids[i], tokens[i], delays[i] = fmt.Sprint(x.JobID), x.Token, "1000"
	}
	array := func(xs []string) string { return "'{" + strings.Join(xs, ",") + "}'" }
	reapArgs := array(ids) + ", " + array(tokens) + ", " + array(delays) + ", NULL"
	check := func(what, sql, index string) {
		t.Helper()
		raw, err := db.ExplainAnalyze(ctx, sql)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		plan, _ := pgtest.ParsePlan(raw)
		if plan.HasSeqScan("jobs") || !plan.Uses(index) || plan.MaxRowsRead("jobs") > 100 {
			t.Fatalf("%s read %.0f rows of jobs in a node, or not off %s:\n%s", what, plan.MaxRowsRead("jobs"), index, raw)
		}
	}
	for _, mode := range []string{"auto", "force_generic_plan"} {
		list, reap := "list_"+mode, "reap_"+mode
		for _, sql := range []string{"SET plan_cache_mode = " + mode,
			"PREPARE " + list + "(timestamptz, int) AS " + pg.Statement("JobListExpiredLeases"),
			"PREPARE " + reap + "(bigint[], uuid[], bigint[], timestamptz) AS " + pg.Statement("JobReapExpiredLeases")} {
			if _, err := db.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
		check(mode+": listing 50 expired leases", "EXECUTE "+list+"(NULL, 50)", "jobs_lease")
		check(mode+": taking back 50 leases", "EXECUTE "+reap+"("+reapArgs+")", "jobs_pkey")
	}
	if _, err := db.Exec(ctx, "RESET plan_cache_mode"); err != nil {
		t.Fatal(err)
	}
}
