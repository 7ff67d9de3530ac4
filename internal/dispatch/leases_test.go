package dispatch

import (
	"context"
	"testing"
)

// A step's completion must not drop the lease of the same job's next attempt, claimed
// while the completion was still on its way (an outcome that made the job runnable at
// once): that used to cancel the new attempt's webhook call and strand the job.
func TestRemovingAnOldLeaseKeepsTheNewOne(t *testing.T) {
	t.Parallel()
	r := newLeaseRegistry()
	oldCtx, cancelOld := context.WithCancelCause(context.Background())
	newCtx, cancelNew := context.WithCancelCause(context.Background())
	r.add(7, "token-old", cancelOld)
	r.add(7, "token-new", cancelNew) // re-claimed before the old completion ran
	r.markCompleting(7, "token-old")
	r.remove(7, "token-old")
	if newCtx.Err() != nil {
		t.Fatal("removing the old lease cancelled the new attempt's call")
	}
	if got := r.snapshot(); len(got) != 1 || got[0].Token != "token-new" {
		t.Fatalf("held leases %+v, want the new one", got)
	}
	if gone := r.lost(r.snapshot()); len(gone) != 1 {
		t.Fatal("the new lease was marked completing by the old attempt")
	}
	_ = oldCtx
	r.remove(7, "token-new")
	if len(r.snapshot()) != 0 {
		t.Fatal("the new lease was not removed")
	}
}
