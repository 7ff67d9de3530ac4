package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// A spawned child with a concurrency key of its own is a child like any other: its end
// joins its parent, which is shown every child's end, and its key keeps K=1 with the key's
// other jobs, whoever spawned them. On Citus such a child lives at its key's placement,
// away from its parent (docs/citus.md, "A child away from its parent"), and the reaper's
// turn carries its end to the parent: here a sweep follows every batch of outcomes, as the
// reaper runs one a second.
func TestChildrenWithConcurrencyKeysOfTheirOwnJoinTheirParents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	ka, kb := "k-a", "k-b"
	p1, p2 := te.insert(t, engine.NewJob{}), te.insert(t, engine.NewJob{})
	parents, _, err := te.Claim(ctx, "default", 10)
	if err != nil || len(parents) != 2 {
		t.Fatalf("claimed %d parents (%v)", len(parents), err)
	}
	for _, st := range parents {
		children := []pg.JobInsert{{Handler: "h", ConcurrencyKey: &ka, Input: json.RawMessage(`"a of p2"`)}}
		if st.ID == p1 {
			children = []pg.JobInsert{
				{Handler: "h", ConcurrencyKey: &ka, Input: json.RawMessage(`"a of p1"`)},
				{Handler: "h", ConcurrencyKey: &kb, Input: json.RawMessage(`"b of p1"`)},
				{Handler: "h", Input: json.RawMessage(`"plain of p1"`)}}
		}
		te.apply(t, st, engine.Outcome{Kind: pg.KindSpawn, Label: "spawn", Children: children})
	}
	kids := map[int64][]int64{p1: childrenOf(t, te, p1), p2: childrenOf(t, te, p2)}
	if len(kids[p1]) != 3 || len(kids[p2]) != 1 {
		t.Fatalf("children: %d of p1, %d of p2; want 3 and 1", len(kids[p1]), len(kids[p2]))
	}
	if pgtest.Citus() {
		for _, c := range append(slices.Clone(kids[p1]), kids[p2]...) {
			j := te.job(t, c)
			want := int(*j.ParentID % pg.Placements) // its parent's placement
			if j.ConcurrencyKey != nil {
				want = pg.PlacementOfKey(*j.ConcurrencyKey)
			}
			if got := int(c % pg.Placements); got != want {
				t.Errorf("child %d (concurrency key %v) lives at placement %d, want %d", c, j.ConcurrencyKey, got, want)
			}
		}
	}
	if j := te.job(t, p1); j.ChildrenTotal != 3 || j.ChildrenFinished != 0 || j.PendingChildren != 3 {
		t.Fatalf("p1 after its spawn: %d children, %d finished, %d pending", j.ChildrenTotal, j.ChildrenFinished, j.PendingChildren)
	}

	joins := map[int64]engine.Step{}
	for round := 0; len(joins) < 2; round++ {
		if round == 10 {
			t.Fatalf("after %d rounds only %d parents ran after their children", round, len(joins))
		}
		steps, _, err := te.Claim(ctx, "default", 10)
		if err != nil {
			t.Fatal(err)
		}
		executingA := 0
		for _, st := range steps {
			if st.ID == p1 || st.ID == p2 {
				joins[st.ID] = st
				te.apply(t, st, engine.Outcome{Kind: pg.KindDone, Label: "done"})
				continue
			}
			if j := te.job(t, st.ID); j.ConcurrencyKey != nil && *j.ConcurrencyKey == ka {
				executingA++
			}
			te.apply(t, st, engine.Outcome{Kind: pg.KindDone, Label: "done", Result: json.RawMessage(fmt.Sprintf(`{"child": %d}`, st.ID))})
		}
		if executingA > 1 {
			t.Fatalf("round %d claimed %d steps of concurrency key %q at once", round, executingA, ka)
		}
		reaperSweep(t, te)
	}
	for parent, st := range joins {
		if st.Wake == nil || *st.Wake != "children" {
			t.Errorf("parent %d ran with wake %v, want children", parent, st.Wake)
		}
		var shown []int64
		for _, c := range st.Children {
			shown = append(shown, c.ID)
			if c.Status != "done" || string(c.Result) != fmt.Sprintf(`{"child": %d}`, c.ID) {
				t.Errorf("parent %d was shown child %d as %s with result %s", parent, c.ID, c.Status, c.Result)
			}
		}
		if !slices.Equal(shown, kids[parent]) {
			t.Errorf("parent %d was shown children %v, want %v", parent, shown, kids[parent])
		}
	}
	if j := te.job(t, p1); j.ChildrenTotal != 3 || j.ChildrenFinished != 3 {
		t.Fatalf("p1 at its end: %d children, %d finished", j.ChildrenTotal, j.ChildrenFinished)
	}
	page, err := te.Children(ctx, p1, nil, 10)
	if err != nil || len(page) != 3 {
		t.Fatalf("the children page of p1: %d jobs, %v", len(page), err)
	}
}

// A cancel of a parent reaches its children wherever they live, and a retry of a child
// whose end its parent counted makes the parent wait for it again. On Citus both cross from
// one shard to another before the call answers: no reaper sweep runs in this test until
// the last part, where a remote child's lease expires and the reaper's own sweep carries
// the end it made to the parent.
func TestARemoteChildIsCancelledWithItsParentAndCountedAgainWhenRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	kc, kd := "k-c", "k-d"
	one := 1

	// The cancel: the parent waits for a child of its own key and one without.
	parent := te.insert(t, engine.NewJob{})
	te.apply(t, te.claim(t), engine.Outcome{Kind: pg.KindSpawn, Label: "spawn", Children: []pg.JobInsert{
		{Handler: "h", ConcurrencyKey: &kc}, {Handler: "h"}}})
	if err := te.Cancel(ctx, parent); err != nil {
		t.Fatal(err)
	}
	for _, c := range childrenOf(t, te, parent) {
		if j := te.job(t, c); j.Status != "cancelled" {
			t.Errorf("child %d (concurrency key %v) is %s right after its parent's cancel", c, j.ConcurrencyKey, j.Status)
		}
	}
	if j := te.job(t, parent); j.Status != "cancelled" || j.ChildrenFinished != 2 || j.ChildrenTotal != 2 {
		t.Fatalf("the cancelled parent: %s, %d of %d children finished", j.Status, j.ChildrenFinished, j.ChildrenTotal)
	}
	if steps, _, err := te.Claim(ctx, "default", 10); err != nil || len(steps) != 0 {
		t.Fatalf("a cancelled family left %d steps to claim (%v)", len(steps), err)
	}

	// The retry: a child of its own key fails, its parent counts it, then it is retried.
	parent = te.insert(t, engine.NewJob{})
	te.apply(t, te.claim(t), engine.Outcome{Kind: pg.KindSpawn, Label: "spawn", Children: []pg.JobInsert{
		{Handler: "h", ConcurrencyKey: &kd, MaxAttempts: &one}, {Handler: "h"}}})
	steps, _, err := te.Claim(ctx, "default", 10)
	if err != nil || len(steps) != 2 {
		t.Fatalf("claimed %d children (%v)", len(steps), err)
	}
	keyed := slices.IndexFunc(steps, func(st engine.Step) bool { return te.job(t, st.ID).ConcurrencyKey != nil })
	failed, other := steps[keyed], steps[1-keyed]
	te.apply(t, failed, engine.Outcome{Kind: pg.KindFail, Label: "fail", Error: json.RawMessage(`{"message": "no"}`)})
	if j := te.job(t, parent); j.Status != "awaiting" || j.PendingChildren != 1 {
		t.Fatalf("after the keyed child failed: parent %s, %d pending", j.Status, j.PendingChildren)
	}
	if err := te.Retry(ctx, failed.ID); err != nil {
		t.Fatal(err)
	}
	if j := te.job(t, parent); j.Status != "awaiting" || j.PendingChildren != 2 {
		t.Fatalf("right after the keyed child was retried: parent %s, %d pending, want awaiting with 2", j.Status, j.PendingChildren)
	}
	te.apply(t, other, engine.Outcome{Kind: pg.KindDone, Label: "done"})
	if j := te.job(t, parent); j.Status != "awaiting" || j.PendingChildren != 1 {
		t.Fatalf("with the retried child still to run: parent %s, %d pending", j.Status, j.PendingChildren)
	}
	again := te.claim(t)
	if again.ID != failed.ID {
		t.Fatalf("claimed %d, want the retried child %d", again.ID, failed.ID)
	}
	te.apply(t, again, engine.Outcome{Kind: pg.KindDone, Label: "done", Result: json.RawMessage(`{"second": true}`)})
	join := te.claim(t)
	if join.ID != parent || len(join.Children) != 2 {
		t.Fatalf("claimed %d with %d children, want the parent %d with 2", join.ID, len(join.Children), parent)
	}
	for _, c := range join.Children {
		if c.Status != "done" {
			t.Errorf("the parent was shown child %d as %s", c.ID, c.Status)
		}
		if c.ID == failed.ID && string(c.Result) != `{"second": true}` {
			t.Errorf("the parent was shown the retried child's result %s", c.Result)
		}
	}
	te.apply(t, join, engine.Outcome{Kind: pg.KindDone, Label: "done"})

	// A cancel right after a child's retry: the child, live again, is cancelled.
	ke, hour := "k-e", time.Hour.Milliseconds()
	parent = te.insert(t, engine.NewJob{})
	te.apply(t, te.claim(t), engine.Outcome{Kind: pg.KindSpawn, Label: "spawn", Children: []pg.JobInsert{
		{Handler: "h", ConcurrencyKey: &ke, MaxAttempts: &one}, {Handler: "h", DelayMS: &hour}}})
	child := te.claim(t)
	te.apply(t, child, engine.Outcome{Kind: pg.KindFail, Label: "fail", Error: json.RawMessage(`{"message": "no"}`)})
	if err := te.Retry(ctx, child.ID); err != nil {
		t.Fatal(err)
	}
	if err := te.Cancel(ctx, parent); err != nil {
		t.Fatal(err)
	}
	if j := te.job(t, child.ID); j.Status != "cancelled" {
		t.Fatalf("the child retried before its parent's cancel is %s, want cancelled", j.Status)
	}
	if j := te.job(t, parent); j.ChildrenFinished != 2 || j.ChildrenTotal != 2 {
		t.Fatalf("the cancelled parent: %d of %d children finished, want 2 of 2", j.ChildrenFinished, j.ChildrenTotal)
	}

	// A bulk cancel and a bulk retry by filter: each carries what it owes across shards
	// before it answers (the remote child's end to its parent's stub, then its revival).
	kb, bulkQueue := "k-b", "family-bulk"
	parent = te.insert(t, engine.NewJob{Queue: bulkQueue})
	spawn, _, err := te.Claim(ctx, bulkQueue, 1)
	if err != nil || len(spawn) != 1 {
		t.Fatalf("the claim of the bulk family's parent: %d steps (%v)", len(spawn), err)
	}
	te.apply(t, spawn[0], engine.Outcome{Kind: pg.KindSpawn, Label: "spawn", Children: []pg.JobInsert{
		{Handler: "h", ConcurrencyKey: &kb}}})
	if r, err := te.CancelJobs(ctx, engine.BulkFilter{Queue: &bulkQueue}, 0); err != nil || r.Changed != 2 {
		t.Fatalf("the bulk cancel: %+v (%v), want 2 changed", r, err)
	}
	if j := te.job(t, parent); j.Status != "cancelled" || j.ChildrenFinished != 1 || j.ChildrenTotal != 1 {
		t.Fatalf("right after the bulk cancel: parent %s with %d of %d children finished, want cancelled with 1 of 1",
			j.Status, j.ChildrenFinished, j.ChildrenTotal)
	}
	if r, err := te.RetryJobs(ctx, engine.BulkFilter{Queue: &bulkQueue}, 0); err != nil || r.Changed != 2 {
		t.Fatalf("the bulk retry: %+v (%v), want 2 changed", r, err)
	}
	if j := te.job(t, parent); j.ChildrenFinished != 0 || j.ChildrenTotal != 1 {
		t.Fatalf("right after the bulk retry: parent %s with %d of %d children finished, want 0 of 1",
			j.Status, j.ChildrenFinished, j.ChildrenTotal)
	}

	// An end no call carries: a remote child whose process died. The reaper takes its
	// expired lease back (its one attempt spent: failed), and the same sweep carries the
	// end to its parent.
	kf := "k-f"
	parent = te.insert(t, engine.NewJob{})
	te.apply(t, te.claim(t), engine.Outcome{Kind: pg.KindSpawn, Label: "spawn", Children: []pg.JobInsert{
		{Handler: "h", ConcurrencyKey: &kf, MaxAttempts: &one}}})
	lost := te.claim(t)
	ahead := te.NewReaper(engine.ReaperConfig{Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
	if _, err := ahead.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if j := te.job(t, lost.ID); j.Status != "failed" {
		t.Fatalf("the child whose lease expired is %s, want failed", j.Status)
	}
	if j := te.job(t, parent); j.Status != "runnable" || j.PendingChildren != 0 {
		t.Fatalf("after the reaper's sweep: parent %s with %d pending, want runnable with 0", j.Status, j.PendingChildren)
	}
}

// A spawned child's key is held wherever the child lives: at its parent's placement, or at
// its own concurrency key's. On Citus both are away from the key's own placement, where a
// holder row names the child (docs/citus.md, "Displaced keys"); the parent here is placed by
// a key of its own, not at the first placement of its shard.
func TestSpawnedChildrenHoldTheirKeysWhereverTheyLive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	pk, ka, kb, ck := "parent-key-7", "child-key-a", "child-key-b", "ck-1"
	parent := te.insert(t, engine.NewJob{Key: &pk})
	te.apply(t, te.claim(t), engine.Outcome{Kind: pg.KindSpawn, Label: "spawn", Children: []pg.JobInsert{
		{Handler: "h", Key: &ka}, {Handler: "h", Key: &kb, ConcurrencyKey: &ck}}})
	kids := childrenOf(t, te, parent)
	if len(kids) != 2 {
		t.Fatalf("%d children, want 2", len(kids))
	}
	for _, k := range []string{ka, kb} {
		got, err := te.InsertJob(ctx, engine.NewJob{Handler: "h", Key: &k})
		if err != nil || !got.Deduplicated || !slices.Contains(kids, got.ID) {
			t.Fatalf("an insert of key %q answered job %d (deduplicated %v, %v), want the child holding it (%v)",
				k, got.ID, got.Deduplicated, err, kids)
		}
	}
}

// A remote child whose key places it on its parent's shard, at another placement, is
// still joined once: the statements of one shard that end a child and join its parent
// leave a remote child to the reaper's turn, and the join reads it from its stub alone.
// (Before, its end was counted by its outcome's statement and again by the sweep, which
// woke its parent while a sibling still ran.)
func TestARemoteChildOnItsParentsShardIsJoinedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	parent := te.insert(t, engine.NewJob{})
	key := "same-shard-0"
	if pgtest.Citus() {
		shardOf := func(placement int) int {
			t.Helper()
			id, err := te.db.QueryInt(ctx, `SELECT get_shard_id_for_distribution_column('jobs', $1::int)`, placement)
			if err != nil {
				t.Fatal(err)
			}
			return int(id)
		}
		at := int(parent % pg.Placements)
		for i := 0; ; i++ {
			key = fmt.Sprintf("same-shard-%d", i)
			if p := pg.PlacementOfKey(key); p != at && shardOf(p) == shardOf(at) {
				break
			}
		}
	}
	te.apply(t, te.claim(t), engine.Outcome{Kind: pg.KindSpawn, Label: "spawn", Children: []pg.JobInsert{
		{Handler: "h", ConcurrencyKey: &key}, {Handler: "h"}}})
	steps, _, err := te.Claim(ctx, "default", 10)
	if err != nil || len(steps) != 2 {
		t.Fatalf("claimed %d children (%v)", len(steps), err)
	}
	keyed := slices.IndexFunc(steps, func(st engine.Step) bool { return te.job(t, st.ID).ConcurrencyKey != nil })
	te.apply(t, steps[keyed], engine.Outcome{Kind: pg.KindDone, Label: "done"})
	reaperSweep(t, te)
	reaperSweep(t, te)
	if j := te.job(t, parent); j.Status != "awaiting" || j.PendingChildren != 1 {
		t.Fatalf("after the keyed child's end: parent %s with %d pending, want awaiting with 1", j.Status, j.PendingChildren)
	}
	te.apply(t, steps[1-keyed], engine.Outcome{Kind: pg.KindDone, Label: "done"})
	reaperSweep(t, te)
	join := te.claim(t)
	if join.ID != parent || len(join.Children) != 2 || join.ChildrenMore != 0 {
		t.Fatalf("claimed %d with %d children (%d more), want the parent %d with 2", join.ID, len(join.Children), join.ChildrenMore, parent)
	}
	if join.Children[0].ID == join.Children[1].ID {
		t.Fatalf("the join was shown child %d twice", join.Children[0].ID)
	}
}

// The outcome that ends a remote child carries its end to its parent at once: the parent
// runs after its last child without waiting for the reaper's turn (which carries the ends
// of the other paths: a cancel, an expired lease).
func TestAParentRunsRightAfterItsLastRemoteChildsOutcome(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, engine.Config{})
	parent := te.insert(t, engine.NewJob{})
	ck := "k-now"
	te.apply(t, te.claim(t), engine.Outcome{Kind: pg.KindSpawn, Label: "spawn", Children: []pg.JobInsert{
		{Handler: "h", ConcurrencyKey: &ck}}})
	te.apply(t, te.claim(t), engine.Outcome{Kind: pg.KindDone, Label: "done", Result: json.RawMessage(`{"now": true}`)})
	if j := te.job(t, parent); j.Status != "runnable" || wakeOf(j) != "children" || j.ChildrenFinished != 1 {
		t.Fatalf("right after its remote child's outcome the parent is %s (wake %q, %d children finished), want runnable",
			j.Status, wakeOf(j), j.ChildrenFinished)
	}
	join := te.claim(t)
	if join.ID != parent || len(join.Children) != 1 || string(join.Children[0].Result) != `{"now": true}` {
		t.Fatalf("claimed %d with children %+v, want the parent with its child's result", join.ID, join.Children)
	}
}

// GC keeps a child while its parent lives, wherever the child lives, and deletes the
// whole family once the parent is finished. On Citus a remote child's shard asks its
// parent's whether the parent lives (JobGCParents); a remote child whose parent is gone
// (deleted by an older GC) is deleted too.
func TestGCKeepsARemoteChildWhileItsParentLives(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	key, hour := "k-gc", time.Hour.Milliseconds()
	parent := te.insert(t, engine.NewJob{})
	te.apply(t, te.claim(t), engine.Outcome{Kind: pg.KindSpawn, Label: "spawn", Children: []pg.JobInsert{
		{Handler: "h", ConcurrencyKey: &key}, {Handler: "h", DelayMS: &hour}}})
	keyed := te.claim(t)
	te.apply(t, keyed, engine.Outcome{Kind: pg.KindDone, Label: "done"})
	family := append(childrenOf(t, te, parent), parent)
	gc := te.NewGC(engine.GCConfig{Retention: time.Nanosecond})
	collect := func() {
		t.Helper()
		for range 5 {
			n, err := gc.Sweep(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				return
			}
		}
	}
	left := func() int64 {
		t.Helper()
		n, err := te.db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE id = ANY ($1)`, family)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	collect()
	if n := left(); n != 3 {
		t.Fatalf("GC with the parent awaiting its delayed child left %d of the family's 3 jobs, want all", n)
	}
	if j := te.job(t, keyed.ID); j.Status != "done" {
		t.Fatalf("the finished child whose parent lives is %s", j.Status)
	}
	if err := te.Cancel(ctx, parent); err != nil {
		t.Fatal(err)
	}
	collect()
	if n := left(); n != 0 {
		t.Fatalf("GC after the parent's cancel left %d of the family's 3 jobs, want none", n)
	}
	if pgtest.Citus() {
		if n, err := te.db.QueryInt(ctx, `SELECT count(*) FROM remote_children WHERE parent_id = $1`, parent); err != nil || n != 0 {
			t.Fatalf("%d stubs of the deleted parent are left (%v)", n, err)
		}
	}

	// A child whose parent is gone, deleted without it: GC deletes it.
	parent = te.insert(t, engine.NewJob{})
	te.apply(t, te.claim(t), engine.Outcome{Kind: pg.KindSpawn, Label: "spawn", Children: []pg.JobInsert{
		{Handler: "h", ConcurrencyKey: &key}}})
	te.apply(t, te.claim(t), engine.Outcome{Kind: pg.KindDone, Label: "done"})
	family = append(childrenOf(t, te, parent), parent)
	te.apply(t, te.claim(t), engine.Outcome{Kind: pg.KindDone, Label: "done"}) // the parent, after its child
	if _, err := te.db.QueryInt(ctx, `WITH d AS (DELETE FROM jobs WHERE id = $1 RETURNING 1) SELECT count(*) FROM d`, parent); err != nil {
		t.Fatal(err)
	}
	collect()
	if n := left(); n != 0 {
		t.Fatalf("GC left %d jobs of a family whose parent was deleted before its child", n)
	}
}

// reaperSweep runs one sweep of a reaper with the defaults: on Citus its turn also carries
// what a family spread over shards owes (pg.DB.RemoteChildrenSweep).
func reaperSweep(t *testing.T, te testEngine) {
	t.Helper()
	if _, err := te.NewReaper(engine.ReaperConfig{}).Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
}
