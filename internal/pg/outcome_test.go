package pg_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// A retry's delay is the caller's (the retry policy is Go's): the outcome statement
// waits exactly the delay it is given, and a retry without one is refused before
// anything is written.
func TestRetryOutcomeTakesItsDelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	if _, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://example.test/", NewSecret: "whsec_x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.JobInsertMany(ctx, []pg.JobInsert{{Queue: "q", Handler: "h"}}); err != nil {
		t.Fatal(err)
	}
	claimed, err := db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: "q", Limit: 1, LeaseTTL: time.Minute, Owner: "t", SignalCap: 100})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %d, %v", len(claimed), err)
	}
	c := claimed[0]
	retry := pg.OutcomeRecord{ID: c.ID, Token: c.LeaseToken, Kind: pg.KindRetry, Label: "retry", Error: json.RawMessage(`{"message":"x"}`)}
	if _, err := db.JobApplyOutcomes(ctx, []pg.OutcomeRecord{retry}, false); err == nil {
		t.Fatal("a retry without a delay was written")
	}
	if j, err := db.JobGet(ctx, c.ID); err != nil || j.Status != "executing" {
		t.Fatalf("after the refused retry: %s, %v", j.Status, err)
	}
	delay := int64(2500)
	retry.DelayMS = &delay
	applied, err := db.JobApplyOutcomes(ctx, []pg.OutcomeRecord{retry}, false)
	if err != nil || len(applied) != 1 || applied[0].Status != "runnable" || applied[0].Ready {
		t.Fatalf("retry: %+v, %v", applied, err)
	}
	j, err := db.JobGet(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := j.EligibleAt.Sub(j.UpdatedAt); got != 2500*time.Millisecond {
		t.Fatalf("the retry waits %s, want 2.5s", got)
	}
}
