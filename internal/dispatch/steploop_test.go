package dispatch_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/dispatch"
	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/webhook"
)

func TestThreeStepJobCarriesStateToDone(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	rcv := newReceiver(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		var st struct{ Visits []int }
		_ = json.Unmarshal(req.Job.State, &st)
		st.Visits = append(st.Visits, req.Job.Step)
		b, _ := json.Marshal(st)
		if req.Job.Step < 2 {
			answer(w, webhook.Response{Next: &webhook.Next{State: b}})
			return
		}
		answer(w, webhook.Response{Done: &webhook.Done{Result: b}})
	})
	h.handler(t, "three", rcv.URL, 3)
	job := h.insert(t, engine.NewJob{Handler: "three", Input: json.RawMessage(`{"user":7}`)})[0]
	startDispatcher(t, h.eng, dispatch.Config{})

	done := waitJob(t, h.db, job.ID, 10*time.Second, hasStatus("done"))
	if !jsonEqual(done.Result, `{"Visits":[0,1,2]}`) {
		t.Fatalf("result %s: state was not carried from step to step", done.Result)
	}
	if done.Step != 3 || done.FinishedAt == nil {
		t.Fatalf("done job: step=%d finished_at=%v", done.Step, done.FinishedAt)
	}
	calls := rcv.Calls()
	if len(calls) != 3 {
		t.Fatalf("webhook saw %d calls, want 3", len(calls))
	}
	for i, c := range calls {
		if c.Job.Step != i || c.Job.Attempt != 1 || !jsonEqual(c.Job.Input, `{"user":7}`) || c.Lease.Token == "" {
			t.Fatalf("call %d: %+v", i, c.Job)
		}
	}
	steps, err := h.db.StepList(context.Background(), job.ID, 10)
	if err != nil {
		t.Fatal(err)
	}
	var outcomes []string
	for _, s := range steps {
		outcomes = append(outcomes, s.Outcome)
	}
	if strings.Join(outcomes, ",") != "next,next,done" {
		t.Fatalf("history %v", outcomes)
	}
}

func TestFailuresAreRetriedThenFail(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	var n atomic.Int32
	flaky := newReceiver(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		switch n.Add(1) {
		case 1:
			http.Error(w, "boom", http.StatusInternalServerError)
		case 2:
			time.Sleep(1500 * time.Millisecond) // the handler's timeout is 1s below
		default:
			answer(w, webhook.Response{Done: &webhook.Done{}})
		}
	})
	h.handler(t, "flaky", flaky.URL, 5)
	if _, err := h.db.HandlerUpsert(context.Background(), pg.HandlerUpsert{Name: "flaky", URL: flaky.URL,
		TimeoutMS: ptr(1000)}); err != nil {
		t.Fatal(err)
	}
	// A port nobody listens on: connection refused.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	refusedURL := "http://" + l.Addr().String()
	l.Close()
	h.handler(t, "refused", refusedURL, 2)

	ok := h.insert(t, engine.NewJob{Handler: "flaky"})[0]
	dead := h.insert(t, engine.NewJob{Handler: "refused"})[0]
	startDispatcher(t, h.eng, dispatch.Config{})

	j := waitJob(t, h.db, ok.ID, 15*time.Second, hasStatus("done"))
	if j.Step != 1 {
		t.Fatalf("step %d", j.Step)
	}
	assertHistory(t, h, ok.ID, "http_error/500/1", "timeout/-/2", "done/200/3")

	f := waitJob(t, h.db, dead.ID, 15*time.Second, hasStatus("failed"))
	if !strings.Contains(string(f.Error), "calling the handler") || f.FinishedAt == nil {
		t.Fatalf("failed job error %s", f.Error)
	}
	assertHistory(t, h, dead.ID, "connection_error/-/1", "connection_error/-/2")
}

func TestRetryAfterIsHonouredAndRedirectsAreNotFollowed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	var followed atomic.Int32
	target := newReceiver(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		followed.Add(1)
		answer(w, webhook.Response{Done: &webhook.Done{}})
	})
	busy := newReceiver(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		w.Header().Set("Retry-After", "120")
		http.Error(w, "slow down", http.StatusTooManyRequests)
	})
	redirect := newReceiver(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		http.Redirect(w, &http.Request{}, target.URL, http.StatusTemporaryRedirect)
	})
	h.handler(t, "busy", busy.URL, 3)
	h.handler(t, "redirect", redirect.URL, 1)
	b := h.insert(t, engine.NewJob{Handler: "busy"})[0]
	r := h.insert(t, engine.NewJob{Handler: "redirect"})[0]
	startDispatcher(t, h.eng, dispatch.Config{})

	bj := waitJob(t, h.db, b.ID, 10*time.Second, func(j pg.JobDetail) bool { return j.Attempt == 1 && j.Status == "runnable" })
	if wait := time.Until(*bj.EligibleAt); wait < 100*time.Second || wait > 121*time.Second {
		t.Fatalf("Retry-After: 120 not honoured: next attempt in %s", wait)
	}
	rj := waitJob(t, h.db, r.ID, 10*time.Second, hasStatus("failed"))
	if !strings.Contains(string(rj.Error), "redirects are not followed") {
		t.Fatalf("redirect error %s", rj.Error)
	}
	assertHistory(t, h, r.ID, "redirect/307/1")
	if followed.Load() != 0 {
		t.Fatalf("the redirect was followed %d times", followed.Load())
	}
}

// assertHistory compares a job's steps history with "outcome/http_status/attempt" items
// ("-" for no status).
func assertHistory(t *testing.T, h *harness, id int64, want ...string) {
	t.Helper()
	steps, err := h.db.StepList(context.Background(), id, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range steps {
		status := "-"
		if s.HTTPStatus != nil {
			status = strconv.Itoa(*s.HTTPStatus)
		}
		got = append(got, s.Outcome+"/"+status+"/"+strconv.Itoa(s.Attempt))
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("job %d history\n got %v\nwant %v", id, got, want)
	}
}
