package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
)

var done = engine.Outcome{Kind: pg.KindDone, Label: "done"}

// claimIDs claims what queue "default" has runnable and answers the steps by job id.
func claimIDs(t *testing.T, te testEngine) map[int64]engine.Step {
	t.Helper()
	steps, _, err := te.Claim(context.Background(), "default", 10)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]engine.Step{}
	for _, s := range steps {
		out[s.ID] = s
	}
	return out
}

func waitsOf(t *testing.T, te testEngine, id int64) engine.JobWaits {
	t.Helper()
	w, err := te.JobWaits(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// onlyStep answers the one recorded attempt of a job.
func onlyStep(t *testing.T, te testEngine, id int64) engine.StepAttempt {
	t.Helper()
	steps, err := te.ListSteps(context.Background(), id, 10)
	if err != nil || len(steps) != 1 {
		t.Fatalf("job %d has %d attempts (%v), want 1", id, len(steps), err)
	}
	return steps[0]
}

// A job behind another of its concurrency key waited for a slot exactly while the other
// held the key: from its insert (the other was executing) to the other's outcome. Derived
// from the history at read time: the wait is there while the holder still runs (up to
// now), and once both finished; the holder itself, and a job without a key, waited for
// nothing.
func TestJobWaitsForASlotWhileAnotherHoldsTheKey(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, engine.Config{})
	key := "k"
	a := te.insert(t, engine.NewJob{ConcurrencyKey: &key})
	claimed := claimIDs(t, te)
	if _, ok := claimed[a]; !ok || len(claimed) != 1 {
		t.Fatalf("claimed %v, want job %d", claimed, a)
	}
	b := te.insert(t, engine.NewJob{ConcurrencyKey: &key})
	plain := te.insert(t, engine.NewJob{})
	if got := claimIDs(t, te); len(got) != 1 || got[plain].ID != plain {
		t.Fatalf("with job %d holding the key, claimed %v, want only the plain job %d", a, got, plain)
	}
	created := te.job(t, b).CreatedAt
	live := waitsOf(t, te, b)
	if len(live.Waits) != 1 || live.Waits[0].Kind != engine.WaitSlot || !live.Waits[0].Start.Equal(created) ||
		live.Waits[0].End.Before(live.Waits[0].Start) {
		t.Fatalf("while %d runs, %d's waits are %+v, want one slot wait from its insert %v", a, b, live, created)
	}
	te.apply(t, claimed[a], done)
	next := claimIDs(t, te)
	if _, ok := next[b]; !ok {
		t.Fatalf("after %d finished, claimed %v, want %d", a, next, b)
	}
	te.apply(t, next[b], done)

	held := onlyStep(t, te, a)
	w := waitsOf(t, te, b)
	if len(w.Waits) != 1 || w.Partial {
		t.Fatalf("%d's waits are %+v, want one", b, w)
	}
	if got := w.Waits[0]; got.Kind != engine.WaitSlot || !got.Start.Equal(created) || !got.End.Equal(held.FinishedAt) {
		t.Fatalf("%d waited %+v, want a slot wait [%v, %v] (its insert to %d's outcome)", b, got, created, held.FinishedAt, a)
	}
	if got := onlyStep(t, te, b).StartedAt; got.Before(w.Waits[0].End) {
		t.Fatalf("%d was claimed at %v, inside its slot wait", b, got)
	}
	for _, id := range []int64{a, plain} {
		if w := waitsOf(t, te, id); len(w.Waits) != 0 {
			t.Fatalf("job %d waited %+v, want nothing", id, w.Waits)
		}
	}
	if _, err := te.JobWaits(context.Background(), 1<<40); err != engine.ErrNotFound {
		t.Fatalf("the waits of a missing job: %v, want ErrNotFound", err)
	}
}

// A gated key admits its limit: a third job waits for a slot only while both of the two
// holders run, until the first of them finishes.
func TestJobWaitsForAGateSlotOnlyWhileTheGateIsFull(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, engine.Config{})
	ctx := context.Background()
	key := "g"
	if _, err := te.SetGate(ctx, key, 2, 1); err != nil {
		t.Fatal(err)
	}
	a1 := te.insert(t, engine.NewJob{ConcurrencyKey: &key})
	a2 := te.insert(t, engine.NewJob{ConcurrencyKey: &key})
	holders := claimIDs(t, te)
	if len(holders) != 2 {
		t.Fatalf("claimed %v, want both of %d and %d", holders, a1, a2)
	}
	b := te.insert(t, engine.NewJob{ConcurrencyKey: &key})
	if got := claimIDs(t, te); len(got) != 0 {
		t.Fatalf("with the gate full, claimed %v", got)
	}
	te.apply(t, holders[a1], done)
	got := claimIDs(t, te)
	if _, ok := got[b]; !ok {
		t.Fatalf("after a slot freed, claimed %v, want %d", got, b)
	}
	te.apply(t, got[b], done)
	te.apply(t, holders[a2], done)
	freed := onlyStep(t, te, a1).FinishedAt
	w := waitsOf(t, te, b)
	if len(w.Waits) != 1 || w.Waits[0].Kind != engine.WaitSlot || !w.Waits[0].Start.Equal(te.job(t, b).CreatedAt) ||
		!w.Waits[0].End.Equal(freed) {
		t.Fatalf("%d's waits are %+v, want one slot wait from its insert to %v (the first holder's outcome)", b, w, freed)
	}
}

// A job of a rate limit whose bucket another job emptied waited for its rate limit from
// that grant until the bucket could hold its weight again (the replay of the bucket from
// the recorded claims: 1 token at 0.5/s is 2 s), while the first job waited for nothing.
func TestJobWaitsForItsRateLimitFromTheGrantThatEmptiedTheBucket(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, engine.Config{})
	ctx := context.Background()
	if _, err := te.SetRateLimit(ctx, "r", 0.5, 1); err != nil {
		t.Fatal(err)
	}
	limit := &engine.RateLimitRef{Name: "r", Key: "x", Weight: 1}
	a := te.insert(t, engine.NewJob{RateLimit: limit})
	b := te.insert(t, engine.NewJob{RateLimit: limit})
	got := claimIDs(t, te)
	if _, ok := got[a]; !ok || len(got) != 1 {
		t.Fatalf("claimed %v, want only %d (a burst of 1)", got, a)
	}
	te.apply(t, got[a], done)
	granted := onlyStep(t, te, a).StartedAt
	w := waitsOf(t, te, b)
	if len(w.Waits) != 1 || w.Waits[0].Kind != engine.WaitRateLimit || !w.Waits[0].Start.Equal(granted) {
		t.Fatalf("%d's waits are %+v, want one rate-limit wait from %d's grant at %v", b, w, a, granted)
	}
	if d := w.Waits[0].End.Sub(granted); d < 2*time.Second-time.Millisecond || d > 2*time.Second+time.Millisecond {
		t.Fatalf("%d's rate-limit wait lasts %v, want 2s (a token at 0.5/s)", b, d)
	}
	if w := waitsOf(t, te, a); len(w.Waits) != 0 {
		t.Fatalf("%d (granted at once) waited %+v", a, w.Waits)
	}
}
