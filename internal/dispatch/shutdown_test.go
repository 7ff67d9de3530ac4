package dispatch_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
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

// A stopped dispatcher leaves no webhook connection open: the kept-alive ones are closed
// once its last call is over.
func TestStopClosesTheWebhookConnections(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 30*time.Second)
	var open atomic.Int64
	srv := httptest.NewUnstartedServer(webhook.Handler(testSecret, func(context.Context, *webhook.StepRequest) webhook.Response {
		return webhook.Response{Done: &webhook.Done{}}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	h.handler(t, "kept", srv.URL+"/steps", 5)
	jobs := h.insert(t, engine.NewJob{Handler: "kept"}, engine.NewJob{Handler: "kept"}, engine.NewJob{Handler: "kept"})
	d := dispatch.New(h.eng, dispatch.Config{PollMin: 10 * time.Millisecond, PollMax: 100 * time.Millisecond,
		QueueRefresh: 100 * time.Millisecond}, nil, nil)
	d.Start(context.Background())
	for _, j := range jobs {
		waitJob(t, h.db, j.ID, 20*time.Second, hasStatus("done"))
	}
	if open.Load() == 0 {
		t.Fatal("no webhook connection was kept alive before Stop")
	}
	d.Stop(context.Background())
	for deadline := time.Now().Add(10 * time.Second); open.Load() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d webhook connections still open after Stop", open.Load())
		}
	}
}
