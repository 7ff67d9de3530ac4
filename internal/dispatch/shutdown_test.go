package dispatch_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/dispatch"
	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/webhook"
)

// A step whose lease is lost while its webhook runs is abandoned: the heartbeat notices,
// the request's context is cancelled, and no outcome is written by the old attempt.
func TestLostLeaseCancelsTheWebhookCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, 600*time.Millisecond)
	entered := make(chan struct{}, 1)
	cancelled := make(chan struct{}, 1)
	rcv := newReceiver(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		entered <- struct{}{}
		select {
		case <-time.After(20 * time.Second):
		case <-reqContext(w).Done():
		}
		cancelled <- struct{}{}
	})
	h.handler(t, "slow", rcv.URL, 5)
	job := h.insert(t, engine.NewJob{Handler: "slow"})[0]
	startDispatcher(t, h.eng, dispatch.Config{})
	<-entered
	// Another process took the step over (as after a reap and a re-claim).
	if _, err := h.db.Exec(ctx, `UPDATE jobs SET lease_token = gen_random_uuid() WHERE id = $1`, job.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the webhook call was not cancelled after its lease was lost")
	}
	j, _ := h.db.JobGet(ctx, job.ID)
	if j.Status != "executing" {
		t.Fatalf("the abandoned attempt changed the job: %s", j.Status)
	}
	if n, _ := h.db.QueryInt(ctx, `SELECT count(*) FROM steps`); n != 0 {
		t.Fatalf("the abandoned attempt wrote %d history rows", n)
	}
}

// Stop lets a running step finish and write its outcome within the grace period.
func TestStopLetsRunningStepsFinish(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 30*time.Second)
	entered := make(chan struct{}, 1)
	rcv := newReceiver(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		entered <- struct{}{}
		time.Sleep(300 * time.Millisecond)
		answer(w, webhook.Response{Done: &webhook.Done{}})
	})
	h.handler(t, "h", rcv.URL, 3)
	job := h.insert(t, engine.NewJob{Handler: "h"})[0]
	d := startDispatcher(t, h.eng, dispatch.Config{ShutdownGrace: 10 * time.Second})
	<-entered
	d.Stop(context.Background())
	j, _ := h.db.JobGet(context.Background(), job.ID)
	if j.Status != "done" {
		t.Fatalf("after a graceful stop the running step is %s, want done", j.Status)
	}
}

// Past the grace period a running step is abandoned, not failed: it stays leased and the
// reaper runs it again once the lease expires.
func TestStopPastGraceLeavesTheStepToLeaseExpiry(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 30*time.Second)
	entered := make(chan struct{}, 1)
	rcv := newReceiver(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		entered <- struct{}{}
		select {
		case <-time.After(20 * time.Second):
		case <-reqContext(w).Done():
		}
	})
	h.handler(t, "h", rcv.URL, 3)
	job := h.insert(t, engine.NewJob{Handler: "h"})[0]
	d := startDispatcher(t, h.eng, dispatch.Config{ShutdownGrace: 200 * time.Millisecond})
	<-entered
	started := time.Now()
	d.Stop(context.Background())
	if took := time.Since(started); took > 5*time.Second {
		t.Fatalf("Stop took %s with a 200ms grace", took)
	}
	j, _ := h.db.JobGet(context.Background(), job.ID)
	if j.Status != "executing" || j.Attempt != 1 {
		t.Fatalf("abandoned step: status=%s attempt=%d, want executing (left to lease expiry)", j.Status, j.Attempt)
	}
}
