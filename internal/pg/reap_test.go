package pg_test

import (
	"context"
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
