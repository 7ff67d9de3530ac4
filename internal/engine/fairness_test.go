package engine_test

import (
	"context"
	"slices"
	"strconv"
	"testing"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// A spawned child keeps its family's fairness key: a child without one of its own takes
// its parent's, whatever queue it names; a child of a parent without one that names a
// fair queue gets the default key "" (so the fair claim takes it); a rerun keeps the
// job's key. On Citus the children live with their parent, where the key places it, and
// a child whose own key places it elsewhere lives there, joining its parent from there;
// so does a child with a concurrency key, which places it before a fairness key does.
func TestSpawnedChildrenKeepTheirFamilysFairnessKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	rr := engine.FairnessRoundRobin
	for _, q := range []string{"fair", "fair2"} {
		if _, err := te.SetQueue(ctx, q, engine.QueueSettings{Fairness: &rr}); err != nil {
			t.Fatal(err)
		}
	}
	acme := "acme"
	parent := te.insert(t, engine.NewJob{Queue: "fair", FairnessKey: &acme})
	steps, err := te.ClaimFair(ctx, "fair", 10, 10, nil)
	if err != nil || len(steps) != 1 || steps[0].ID != parent {
		t.Fatalf("the fair claim of the parent: %d steps, %v", len(steps), err)
	}
	te.apply(t, steps[0], engine.Outcome{Kind: pg.KindSpawn, Label: "spawn", Children: []pg.JobInsert{
		{Handler: "h", Queue: "fair"}, {Handler: "h", Queue: "fair2"}, {Handler: "h", Queue: "unfair"}}})
	children := childrenOf(t, te, parent)
	if len(children) != 3 {
		t.Fatalf("%d children, want 3", len(children))
	}
	for _, c := range children {
		if j := te.job(t, c); j.FairnessKey == nil || *j.FairnessKey != acme {
			t.Errorf("child %d in queue %s has fairness key %v, want its parent's %q", c, j.Queue, j.FairnessKey, acme)
		}
		if pgtest.Citus() && c%pg.Placements != parent%pg.Placements {
			t.Errorf("child %d lives at placement %d, its parent at %d", c, c%pg.Placements, parent%pg.Placements)
		}
	}

	// A parent without a key: its child in a fair queue gets "".
	lone := te.insert(t, engine.NewJob{})
	te.apply(t, te.claim(t), engine.Outcome{Kind: pg.KindSpawn, Label: "spawn", Children: []pg.JobInsert{{Handler: "h", Queue: "fair2"}}})
	kids := childrenOf(t, te, lone)
	if len(kids) != 1 {
		t.Fatalf("the parent without a key has %d children, want 1", len(kids))
	}
	if j := te.job(t, kids[0]); j.FairnessKey == nil || *j.FairnessKey != "" {
		t.Fatalf("a child in a fair queue of a parent without a key has fairness key %v, want \"\"", j.FairnessKey)
	}
	fair2, err := te.ClaimFair(ctx, "fair2", 10, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(fair2) != 2 {
		t.Fatalf("the fair claim of fair2 took %d steps, want both children", len(fair2))
	}

	// A rerun keeps the job's key.
	for _, st := range fair2 {
		te.apply(t, st, engine.Outcome{Kind: pg.KindDone, Label: "done"})
	}
	again, err := te.Rerun(ctx, kids[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	if j := te.job(t, again.ID); j.FairnessKey == nil || *j.FairnessKey != "" {
		t.Fatalf("a rerun of a job with the default key has fairness key %v", j.FairnessKey)
	}

	if !pgtest.Citus() {
		return
	}
	// On Citus, a child whose own key places it away from its parent.
	other := ""
	for i := 0; other == ""; i++ {
		if k := string(rune('a'+i%26)) + string(rune('0'+i/26)); pg.FairnessPlacement(k) != int(parent%pg.Placements) {
			other = k
		}
	}
	second := te.insert(t, engine.NewJob{Queue: "fair", FairnessKey: &acme})
	steps, err = te.ClaimFair(ctx, "fair", 10, 10, nil) // (with the first parent's child in "fair")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(steps, func(st engine.Step) bool { return st.ID == second })
	if i < 0 {
		t.Fatalf("the fair claim did not take the second parent: %d steps", len(steps))
	}
	// The child lives where its key places it, a remote child (docs/citus.md, "A child away
	// from its parent"): the fair claim takes it there, and its end joins its parent.
	te.apply(t, steps[i], engine.Outcome{Kind: pg.KindSpawn, Label: "spawn",
		Children: []pg.JobInsert{{Handler: "h", FairnessKey: &other}}})
	away := childrenOf(t, te, second)
	if len(away) != 1 || int(away[0]%pg.Placements) != pg.FairnessPlacement(other) {
		t.Fatalf("the spawn of a child of key %q made %v, want one child at placement %d", other, away, pg.FairnessPlacement(other))
	}
	if j := te.job(t, away[0]); j.FairnessKey == nil || *j.FairnessKey != other || j.Queue != "fair" {
		t.Fatalf("the remote child: queue %s, fairness key %v", j.Queue, j.FairnessKey)
	}
	for range 3 {
		reaperSweep(t, te)
		steps, err = te.ClaimFair(ctx, "fair", 10, 10, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range steps {
			te.apply(t, st, engine.Outcome{Kind: pg.KindDone, Label: "done"})
		}
		if j := te.job(t, second); j.Status == "done" {
			break
		}
	}
	if j := te.job(t, second); j.Status != "done" {
		t.Fatalf("the parent of the remote child is %s, %d children pending", j.Status, j.PendingChildren)
	}

	// A child with a concurrency key lives at that key's placement (where K=1 is exact),
	// with its fairness key, its own or its parent's: that shard's fair claim takes it, and
	// its end joins its parent.
	third := te.insert(t, engine.NewJob{Queue: "fair", FairnessKey: &acme})
	steps, err = te.ClaimFair(ctx, "fair", 10, 10, nil)
	if err != nil || len(steps) != 1 || steps[0].ID != third {
		t.Fatalf("the fair claim of the third parent: %d steps, %v", len(steps), err)
	}
	own, inherited := "ck-own", "ck-inherited"
	te.apply(t, steps[0], engine.Outcome{Kind: pg.KindSpawn, Label: "spawn", Children: []pg.JobInsert{
		{Handler: "h", FairnessKey: &other, ConcurrencyKey: &own},
		{Handler: "h", ConcurrencyKey: &inherited}}})
	keyed := childrenOf(t, te, third)
	if len(keyed) != 2 {
		t.Fatalf("the spawn of two children with concurrency keys made %v", keyed)
	}
	for _, c := range keyed {
		j := te.job(t, c)
		wantKey, wantAt := other, pg.PlacementOfKey(own)
		if *j.ConcurrencyKey == inherited {
			wantKey, wantAt = acme, pg.PlacementOfKey(inherited)
		}
		if j.FairnessKey == nil || *j.FairnessKey != wantKey || int(c%pg.Placements) != wantAt {
			t.Fatalf("the child of concurrency key %s: fairness key %v at placement %d, want %q at %d",
				*j.ConcurrencyKey, j.FairnessKey, c%pg.Placements, wantKey, wantAt)
		}
	}
	for range 5 {
		reaperSweep(t, te)
		steps, err = te.ClaimFair(ctx, "fair", 10, 10, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range steps {
			te.apply(t, st, engine.Outcome{Kind: pg.KindDone, Label: "done"})
		}
		if j := te.job(t, third); j.Status == "done" {
			break
		}
	}
	if j := te.job(t, third); j.Status != "done" {
		t.Fatalf("the parent of the children with concurrency keys is %s, %d children pending", j.Status, j.PendingChildren)
	}
}

// childrenOf answers the ids of parent's children.
func childrenOf(t *testing.T, te testEngine, parent int64) []int64 {
	t.Helper()
	rows, err := te.db.QueryStrings(context.Background(), `SELECT id::text FROM jobs WHERE parent_id = $1 ORDER BY id`, parent)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, len(rows))
	for i, r := range rows {
		if ids[i], err = strconv.ParseInt(r[0], 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}
