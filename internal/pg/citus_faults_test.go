package pg_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// While a worker is down, the statements the Citus dialect runs shard by shard go on with
// the shards of the live worker, whatever their order: a claim answers their steps, a
// heartbeat extends their leases, the reaper lists their expired leases, a batch of
// outcomes applies theirs. Each reports the down worker's error (but a claim or a reaper's
// list that found work elsewhere). Each used to stop at the first shard that failed; the
// dispatcher's test of a worker down (TestCitusWorkerDownDuringADrain, internal/dispatch)
// shows what that did to a drain, this one holds each statement to it.
func TestCitusAWorkerDownStopsOnlyItsShards(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	own := pgtest.NewOwnCitus(t, pgtest.OwnCitusOptions{})
	db := pgtest.Open(t, own.URL, pg.Options{MaxConns: 4})
	if _, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://example.test/", NewSecret: "whsec_x"}); err != nil {
		t.Fatal(err)
	}
	// One job a batch: each batch goes to the next shard, so two jobs on every shard.
	insert := func() {
		for range 64 {
			if _, err := db.JobInsertMany(ctx, []pg.JobInsert{{Queue: "q", Handler: "h"}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	insert()
	nodeOf := map[int]int{}
	rows, err := db.QueryStrings(ctx, `SELECT v.p, n.nodeport FROM generate_series(0, 1023) AS v(p)
		JOIN pg_dist_placement pl ON pl.shardid = get_shard_id_for_distribution_column('jobs', v.p)
		JOIN pg_dist_node n ON n.groupid = pl.groupid`)
	if err != nil {
		t.Fatal(err)
	}
	var live []int
	for _, r := range rows {
		p, _ := strconv.Atoi(r[0])
		nodeOf[p], _ = strconv.Atoi(r[1])
		if nodeOf[p] == own.Port(1) {
			live = append(live, p)
		}
	}
	isLive := func(id int64) bool { return nodeOf[int(id%pg.Placements)] == own.Port(1) }
	claim := func() ([]pg.ClaimedJob, error) {
		return db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: "q", Limit: 128, LeaseTTL: time.Minute, Owner: "t", SignalCap: 100})
	}
	held, err := claim()
	if err != nil || len(held) != 64 {
		t.Fatalf("claimed %d (%v), want 64", len(held), err)
	}
	liveHeld := 0
	for _, c := range held {
		if isLive(c.ID) {
			liveHeld++
		}
	}
	if liveHeld == 0 || liveHeld == len(held) {
		t.Fatalf("%d of %d steps on worker 1: not on both workers", liveHeld, len(held))
	}
	insert()
	own.StopNodeImmediately(2)

	// A claim answers the live worker's steps.
	claimed, err := claim()
	if err != nil || len(claimed) != 64-32 {
		t.Fatalf("claim with worker 2 down: %d (%v), want the 32 on worker 1", len(claimed), err)
	}
	for _, c := range claimed {
		if !isLive(c.ID) {
			t.Fatalf("claimed job %d of the stopped worker", c.ID)
		}
	}
	// A heartbeat of every lease extends the live worker's, and reports the stopped one.
	leases := make([]pg.Lease, len(held))
	for i, c := range held {
		leases[i] = pg.Lease{JobID: c.ID, Token: c.LeaseToken}
	}
	if _, err := db.LeaseExtendMany(ctx, leases, time.Hour); err == nil {
		t.Fatal("a heartbeat with worker 2 down reported no error")
	}
	extended, err := db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE lease_expires_at > now() + interval '30 minutes'
		AND placement = ANY($1)`, live)
	if err != nil || int(extended) != liveHeld {
		t.Fatalf("%d leases extended on worker 1 (%v), want its %d", extended, err, liveHeld)
	}
	// The reaper, ahead in time, lists the live worker's expired leases.
	ahead := time.Now().Add(2 * time.Hour)
	expired, err := db.JobListExpiredLeases(ctx, 1000, &ahead)
	if err != nil || len(expired) != liveHeld+len(claimed) {
		t.Fatalf("%d expired leases listed (%v), want worker 1's %d", len(expired), err, liveHeld+len(claimed))
	}
	// A batch of outcomes applies the live worker's and reports the stopped one.
	ok := 200
	outcomes := make([]pg.OutcomeRecord, len(held))
	for i, c := range held {
		outcomes[i] = pg.OutcomeRecord{ID: c.ID, Token: c.LeaseToken, Kind: pg.KindDone, Label: "done", Attempt: c.Attempt, HTTPStatus: &ok}
	}
	applied, err := db.JobApplyOutcomes(ctx, outcomes, false)
	if err == nil || len(applied) != liveHeld {
		t.Fatalf("outcomes with worker 2 down: %d applied (%v), want worker 1's %d and an error", len(applied), err, liveHeld)
	}
	for _, a := range applied {
		if !isLive(a.ID) {
			t.Fatalf("job %d of the stopped worker reported applied", a.ID)
		}
	}
	// Back, the stopped worker's outcomes are written too, and once only.
	if err := own.RestartNode(ctx, 2); err != nil {
		t.Fatal(err)
	}
	applied, err = db.JobApplyOutcomes(ctx, outcomes, false)
	if err != nil || len(applied) != len(held)-liveHeld {
		t.Fatalf("outcomes with worker 2 back: %d applied (%v), want its %d", len(applied), err, len(held)-liveHeld)
	}
	if n, err := db.QueryInt(ctx, `SELECT count(*) FROM steps WHERE outcome = 'done'`); err != nil || int(n) != len(held) {
		t.Fatalf("%d history rows done (%v), want %d", n, err, len(held))
	}
}
