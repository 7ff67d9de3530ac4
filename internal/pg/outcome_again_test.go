package pg_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// An outcome written again after its first write committed changes nothing: not the job,
// not the history, not a spawn's children. The completer writes an outcome again when it
// was told the write failed although it committed (the answer lost with a restarting
// coordinator; on Citus, a batch whose later shard failed), and a late outcome meets the
// reaper's take-back of its claim, and the reverse. On Citus the history and the children
// are separate statements of the outcome's transaction that join the rows it wrote: they
// joined by the lease token the first write left on the row, and wrote a second history
// row for the claim (TestCitusWorkerDownDuringADrain found them), and would have spawned
// the children twice. The last case is a stale record of a parent in the same batch as
// its child's end, which wakes the parent in that transaction.
func TestOutcomeWrittenAgainChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	if _, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://example.test/", NewSecret: "whsec_x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.JobInsertMany(ctx, make4(pg.JobInsert{Queue: "q", Handler: "h"})); err != nil {
		t.Fatal(err)
	}
	claimed, err := db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: "q", Limit: 4, LeaseTTL: time.Minute, Owner: "t", SignalCap: 100})
	if err != nil || len(claimed) != 4 {
		t.Fatalf("claim: %d, %v", len(claimed), err)
	}
	slices.SortFunc(claimed, func(a, b pg.ClaimedJob) int { return int(a.ID - b.ID) })
	next, spawned, reapedLate, lateOutcome := claimed[0], claimed[1], claimed[2], claimed[3]
	ok := 200
	nextOf := func(c pg.ClaimedJob, kind string) pg.OutcomeRecord {
		return pg.OutcomeRecord{ID: c.ID, Token: c.LeaseToken, Kind: kind, Label: kind, Attempt: c.Attempt, HTTPStatus: &ok}
	}
	spawn := pg.OutcomeRecord{ID: spawned.ID, Token: spawned.LeaseToken, Kind: pg.KindSpawn, Label: "spawn",
		Children: json.RawMessage(`[{"queue": "q", "handler": "h"}]`), HTTPStatus: &ok}
	apply := func(what string, want int, recs ...pg.OutcomeRecord) {
		t.Helper()
		applied, err := db.JobApplyOutcomes(ctx, recs, false)
		if err != nil || len(applied) != want {
			t.Fatalf("%s: %d applied (%v), want %d", what, len(applied), err, want)
		}
	}
	apply("the first writes", 3, nextOf(next, pg.KindNext), spawn, nextOf(reapedLate, pg.KindNext))
	apply("the same outcomes again", 0, nextOf(next, pg.KindNext), spawn, nextOf(reapedLate, pg.KindNext))
	// The reaper, ahead in time, takes back the claims it listed: one outcome came first,
	// the other comes after.
	ahead := time.Now().Add(time.Hour)
	reaped, err := db.JobReapExpiredLeases(ctx, []pg.LeaseReap{{Lease: pg.Lease{JobID: reapedLate.ID, Token: reapedLate.LeaseToken}},
		{Lease: pg.Lease{JobID: lateOutcome.ID, Token: lateOutcome.LeaseToken}}}, &ahead)
	if err != nil || len(reaped) != 1 || reaped[0].JobID != lateOutcome.ID {
		t.Fatalf("reaped %+v (%v), want only job %d", reaped, err, lateOutcome.ID)
	}
	apply("a late outcome of a claim taken back", 0, nextOf(lateOutcome, pg.KindNext))
	// The child ends, and its parent's spawn comes again in the same batch.
	children, err := db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: "q", Limit: 10, LeaseTTL: time.Minute, Owner: "t", SignalCap: 100})
	if err != nil {
		t.Fatal(err)
	}
	var child *pg.ClaimedJob
	for i := range children {
		if children[i].ID != next.ID && children[i].ID != reapedLate.ID && children[i].ID != lateOutcome.ID {
			child = &children[i]
		}
	}
	if child == nil {
		t.Fatalf("the spawned child was not claimed: %+v", children)
	}
	apply("the child's end beside its parent's spawn again", 1, spawn, nextOf(*child, pg.KindDone))

	for _, c := range []struct {
		id      int64
		history []string
	}{
		{next.ID, []string{"0/1/next"}},
		{spawned.ID, []string{"0/1/spawn"}},
		{reapedLate.ID, []string{"0/1/next"}},
		{lateOutcome.ID, []string{"0/1/lease_expired"}},
	} {
		steps, err := db.StepList(ctx, c.id, 10)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range steps {
			got = append(got, fmt.Sprintf("%d/%d/%s", s.Step, s.Attempt, s.Outcome))
		}
		if !slices.Equal(got, c.history) {
			t.Errorf("job %d: history %v, want %v", c.id, got, c.history)
		}
	}
	parent, err := db.JobGet(ctx, spawned.ID)
	if err != nil {
		t.Fatal(err)
	}
	if parent.ChildrenTotal != 1 || parent.PendingChildren != 0 || parent.Status != "runnable" {
		t.Errorf("the parent: %d children, %d pending, %s; want its one child, done, and itself runnable",
			parent.ChildrenTotal, parent.PendingChildren, parent.Status)
	}
}

// make4 is four copies of j.
func make4(j pg.JobInsert) []pg.JobInsert { return []pg.JobInsert{j, j, j, j} }
