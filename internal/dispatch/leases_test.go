package dispatch

import (
	"errors"
	"testing"
)

// A step's completion must not drop the lease of the same job's next attempt, claimed
// while the completion was still on its way (an outcome that made the job runnable at
// once): that used to cancel the new attempt's webhook call and strand the job.
func TestRemovingAnOldLeaseKeepsTheNewOne(t *testing.T) {
	t.Parallel()
	r := newLeaseRegistry()
	oldCall, newCall := new(callControl), new(callControl)
	r.add(7, "token-old", oldCall)
	r.add(7, "token-new", newCall) // re-claimed before the old completion ran
	r.markCompleting(7, "token-old")
	r.remove(7, "token-old")
	if newCall.aborted() {
		t.Fatal("removing the old lease aborted the new attempt's call")
	}
	if got := r.snapshot(); len(got) != 1 || got[0].Token != "token-new" {
		t.Fatalf("held leases %+v, want the new one", got)
	}
	if gone := r.lost(r.snapshot()); len(gone) != 1 {
		t.Fatal("the new lease was marked completing by the old attempt")
	}
	if !newCall.aborted() || oldCall.aborted() {
		t.Fatalf("a lost lease aborts its own call only: new aborted %v, old %v", newCall.aborted(), oldCall.aborted())
	}
	r.remove(7, "token-new")
	if len(r.snapshot()) != 0 {
		t.Fatal("the new lease was not removed")
	}
}

// The shutdown's abort reaches every call still running, and only those: a call whose
// outcome is being written is over.
func TestAbortAllAbortsTheRunningCalls(t *testing.T) {
	t.Parallel()
	r := newLeaseRegistry()
	running, completing := new(callControl), new(callControl)
	r.add(1, "a", running)
	r.add(2, "b", completing)
	r.markCompleting(2, "b")
	cause := errors.New("grace over")
	r.abortAll(cause)
	if !running.aborted() || completing.aborted() {
		t.Fatalf("running aborted %v, completing aborted %v", running.aborted(), completing.aborted())
	}
	running.abort(errors.New("later")) // the first cause stays
	if running.cause != cause {
		t.Fatalf("cause %v, want the first", running.cause)
	}
}
