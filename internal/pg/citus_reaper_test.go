package pg_test

import (
	"context"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// The reaper's sweep on Citus asks every shard at once where it has work (one fan-out
// statement each for expired leases and expired awaits) and then visits only those
// shards: a sweep that finds nothing is two statements, not two on each of the 32 shards,
// and an expired lease or await is still taken back on its shard.
func TestCitusReaperVisitsOnlyTheShardsWithWork(t *testing.T) {
	t.Parallel()
	citusOnly(t)
	ctx := context.Background()
	counter := &pg.StatementCounter{}
	db := pgtest.Open(t, pgtest.NewDatabase(t), pg.Options{Counter: counter})
	if _, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://example.test/", NewSecret: "whsec_x"}); err != nil {
		t.Fatal(err)
	}
	sweep := func(asOf *time.Time) (leases []pg.ExpiredLease, awaits int) {
		t.Helper()
		counter.Reset()
		leases, err := db.JobListExpiredLeases(ctx, 100, asOf)
		if err != nil {
			t.Fatal(err)
		}
		if awaits, err = db.JobWakeExpiredAwaits(ctx, 100, asOf); err != nil {
			t.Fatal(err)
		}
		return leases, awaits
	}
	expect := func(what string, want map[string]int) {
		t.Helper()
		for name, n := range want {
			if got := counter.Count(name); got != n {
				t.Fatalf("%s: %s ran %d times, want %d (all: %v)", what, name, got, n, counter.Snapshot())
			}
		}
	}

	if leases, awaits := sweep(nil); len(leases) != 0 || awaits != 0 {
		t.Fatalf("an empty cluster: %d leases, %d awaits", len(leases), awaits)
	}
	expect("nothing to reap", map[string]int{"JobExpiredLeasePlacements": 1, "JobListExpiredLeases": 0,
		"JobDueAwaitPlacements": 1, "JobWakeExpiredAwaits": 0})

	// Three jobs, each on a shard of its own (each insert call lands on the next shard):
	// the first two claimed (their leases expire an hour ahead), the third made to await
	// with a deadline in half an hour.
	var ids []int64
	for range 3 {
		got, err := db.JobInsertMany(ctx, []pg.JobInsert{{Queue: "q", Handler: "h"}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got[0].ID)
	}
	claimed, err := db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: "q", Limit: 10, LeaseTTL: time.Hour, Owner: "t", SignalCap: 100})
	if err != nil || len(claimed) != 3 {
		t.Fatalf("claim: %d, %v", len(claimed), err)
	}
	awaiting := ids[2]
	if n, err := db.Exec(ctx, `UPDATE jobs SET status = 'awaiting', lease_token = NULL, lease_owner = NULL,
		lease_expires_at = NULL, eligible_at = now() + interval '30 minutes' WHERE placement = $1 AND id = $2`,
		awaiting%pg.Placements, awaiting); err != nil || n != 1 {
		t.Fatalf("make job %d await: %d rows, %v", awaiting, n, err)
	}
	shards := map[int64]bool{}
	for _, id := range ids {
		s, err := db.QueryInt(ctx, `SELECT get_shard_id_for_distribution_column('jobs', $1::int)`, id%pg.Placements)
		if err != nil {
			t.Fatal(err)
		}
		shards[s] = true
	}
	if len(shards) != 3 {
		t.Fatalf("the three jobs are on %d shards, want 3", len(shards))
	}

	if leases, awaits := sweep(nil); len(leases) != 0 || awaits != 0 {
		t.Fatalf("nothing due yet: %d leases, %d awaits", len(leases), awaits)
	}
	expect("nothing due yet", map[string]int{"JobExpiredLeasePlacements": 1, "JobListExpiredLeases": 0,
		"JobDueAwaitPlacements": 1, "JobWakeExpiredAwaits": 0})

	ahead := time.Now().Add(2 * time.Hour)
	leases, awaits := sweep(&ahead)
	if len(leases) != 2 || awaits != 1 {
		t.Fatalf("two hours ahead: %d leases (want 2), %d awaits woken (want 1)", len(leases), awaits)
	}
	for _, l := range leases {
		if l.JobID == awaiting {
			t.Fatalf("listed the awaiting job %d as an expired lease", awaiting)
		}
	}
	expect("two leases and an await due", map[string]int{"JobExpiredLeasePlacements": 1, "JobListExpiredLeases": 2,
		"JobDueAwaitPlacements": 1, "JobWakeExpiredAwaits": 1})
	j, err := db.JobGet(ctx, awaiting)
	if err != nil || j.Status != "runnable" {
		t.Fatalf("the awaiting job after its deadline: %+v, %v", j, err)
	}
}
