package pg_test

import (
	"context"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// Plans follow the jobs table's growth: a claim planned while jobs was empty (and
// analyzed so) scans the whole table once it holds 15 000 rows; once ReplanIfGrown saw
// the growth and reopened the connections, the same claim reads jobs_pick and no
// sequential scan of jobs. A table that has not grown keeps its connections.
func TestPlansFollowTheJobsTableGrowth(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.Open(t, pgtest.NewDatabase(t), pg.Options{MaxConns: 1})
	for _, s := range []string{`INSERT INTO handlers (name, url, secret) VALUES ('h', 'http://example.test/', 'whsec_x')`,
		`VACUUM ANALYZE jobs`} {
		if _, err := db.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if grown, _, err := db.ReplanIfGrown(ctx); err != nil || grown {
		t.Fatalf("an empty table replanned: %v %v", grown, err)
	}
	claim := func() {
		t.Helper()
		if _, err := db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: "shared", Limit: 100, LeaseTTL: time.Minute, Owner: "t", SignalCap: 10}); err != nil {
			t.Fatal(err)
		}
	}
	claim() // planned on the empty table
	if _, err := db.Exec(ctx, `INSERT INTO jobs (queue, handler, max_attempts, eligible_at)
		SELECT 'shared', 'h', 5, now() + interval '1 hour' FROM generate_series(1, 15000)`); err != nil {
		t.Fatal(err)
	}
	// Sequential scans of jobs by one claim, from the statistics its backend flushes as it
	// goes idle (one connection: the claim's backend is the reader's).
	seqScans := func() int64 {
		t.Helper()
		if _, err := db.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		before, err := db.QueryInt(ctx, `SELECT seq_scan FROM pg_stat_user_tables WHERE relname = 'jobs'`)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		claim()
		if _, err := db.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		after, err := db.QueryInt(ctx, `SELECT seq_scan FROM pg_stat_user_tables WHERE relname = 'jobs'`)
		if err != nil {
			t.Fatal(err)
		}
		return after - before
	}
	if n := seqScans(); n == 0 {
		t.Fatal("the claim planned on the empty table did not scan jobs: this test no longer shows the stale plan")
	}
	grown, pages, err := db.ReplanIfGrown(ctx)
	if err != nil || !grown {
		t.Fatalf("jobs grew to %d pages and nothing was replanned (%v)", pages, err)
	}
	if n := seqScans(); n != 0 {
		t.Fatalf("after replanning the claim still scans jobs %d times", n)
	}
	if grown, _, err := db.ReplanIfGrown(ctx); err != nil || grown {
		t.Fatalf("replanned again without growth: %v %v", grown, err)
	}
}
