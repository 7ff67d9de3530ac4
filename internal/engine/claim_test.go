package engine_test

import (
	"context"
	"testing"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// A queue of plain rows is claimed by the plain statement alone; when it meets a row
// that needs admission (a concurrency key), the same Claim takes that row with the
// admitting statement, and the queue's next claims use it.
func TestClaimGoesOnWithAdmissionWhenThePlainClaimMeetsAKeyedRow(t *testing.T) {
	t.Parallel()
	pgtest.SkipOnCitus(t, "the Citus claim is one statement per shard with the K=1 guard inline (JobClaim): no plain and admitting claims")
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	te.insert(t, engine.NewJob{})
	te.insert(t, engine.NewJob{})
	steps, _, err := te.Claim(ctx, "default", 10)
	if err != nil || len(steps) != 2 {
		t.Fatalf("claim of plain rows: %d, %v", len(steps), err)
	}
	if plain, full := te.counter.Count("JobClaimPlain"), te.counter.Count("JobClaimBatch"); plain != 1 || full != 0 {
		t.Fatalf("plain rows took %d plain and %d admitting claims, want 1 and 0", plain, full)
	}

	key := "k"
	keyed := te.insert(t, engine.NewJob{ConcurrencyKey: &key})
	te.insert(t, engine.NewJob{})
	steps, _, err = te.Claim(ctx, "default", 10)
	if err != nil || len(steps) != 2 {
		t.Fatalf("claim of a plain and a keyed row: %d, %v", len(steps), err)
	}
	found := false
	for _, s := range steps {
		found = found || s.ID == keyed
	}
	if !found {
		t.Fatal("the keyed row was not claimed by the same Claim")
	}
	if plain, full := te.counter.Count("JobClaimPlain"), te.counter.Count("JobClaimBatch"); plain != 2 || full != 1 {
		t.Fatalf("after the keyed row: %d plain and %d admitting claims, want 2 and 1", plain, full)
	}

	te.insert(t, engine.NewJob{})
	if steps, _, err = te.Claim(ctx, "default", 10); err != nil || len(steps) != 1 {
		t.Fatalf("the claim after: %d, %v", len(steps), err)
	}
	if plain, full := te.counter.Count("JobClaimPlain"), te.counter.Count("JobClaimBatch"); plain != 2 || full != 2 {
		t.Fatalf("the claim after the keyed row: %d plain and %d admitting claims, want 2 and 2", plain, full)
	}
}
