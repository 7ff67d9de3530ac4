package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/dispatch"
	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/httpapi"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
	"github.com/gendurable/gendurable/internal/webhooktest"
	"github.com/gendurable/gendurable/webhook"
)

// stack is the whole service on a fresh database: the API, a dispatcher and a reaper,
// with every statement counted.
type stack struct {
	*api
	counter *pg.StatementCounter
}

func newStack(t *testing.T, leaseTTL time.Duration) *stack {
	t.Helper()
	counter := &pg.StatementCounter{}
	db := pgtest.Open(t, pgtest.NewDatabase(t), pg.Options{Counter: counter, MaxConns: 30})
	eng, err := engine.New(db, engine.Config{LeaseTTL: leaseTTL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.New(eng, httpapi.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(conformance(t, h))
	t.Cleanup(srv.Close)
	d := dispatch.New(eng, dispatch.Config{PollMin: 10 * time.Millisecond, PollMax: 100 * time.Millisecond,
		QueueRefresh: 100 * time.Millisecond}, nil, nil)
	d.Start(context.Background())
	reaper := eng.NewReaper(engine.ReaperConfig{Interval: 50 * time.Millisecond})
	reaper.Start(context.Background())
	rollups := eng.NewStepRollups(engine.StepRollupConfig{Interval: 20 * time.Millisecond})
	rollups.Start(context.Background())
	t.Cleanup(func() { reaper.Stop(); d.Stop(context.Background()); rollups.Stop() })
	return &stack{api: &api{t: t, url: srv.URL, db: db, eng: eng}, counter: counter}
}

// handler registers name as a handler answered by respond.
func (s *stack) handler(name string, respond webhooktest.Respond) *webhooktest.Receiver {
	s.t.Helper()
	rcv := webhooktest.New(s.t, respond)
	r := s.do("PUT", "/v1/handlers/"+name, fmt.Sprintf(`{"url": %q, "secret": %q, "backoff_base": "10ms", "timeout": "5s"}`,
		rcv.URL, webhooktest.Secret))
	if r.status != 200 {
		s.t.Fatalf("register %s: %d %s", name, r.status, r.body)
	}
	return rcv
}

func (s *stack) insert(body string) int64 {
	s.t.Helper()
	r := s.do("POST", "/v1/jobs", body)
	if r.status != 201 {
		s.t.Fatalf("insert: %d %s", r.status, r.body)
	}
	return int64(r.json(s.t)["id"].(float64))
}

// job fetches a job through the API.
func (s *stack) job(id int64) map[string]any {
	s.t.Helper()
	return s.do("GET", fmt.Sprintf("/v1/jobs/%d", id), "").json(s.t)
}

// waitStatus polls a job until it has status.
func (s *stack) waitStatus(id int64, status string, timeout time.Duration) map[string]any {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		j := s.job(id)
		if j["status"] == status {
			return j
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("job %d: status %v after %s, want %s: %v", id, j["status"], timeout, status, j)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func signalNames(req *webhook.StepRequest) map[string]int {
	names := map[string]int{}
	for _, sg := range req.Signals {
		names[sg.Name]++
	}
	return names
}

// Lost-wakeup stress: 1 000 jobs each wait for one signal that is sent at a random
// moment (before the first step, while it runs, while it parks, after) from many
// goroutines. Every job must see its signal exactly once and finish; none may be left
// waiting.
func TestNoLostWakeupUnderRacingSignals(t *testing.T) {
	t.Parallel()
	s := newStack(t, 30*time.Second)
	var seen sync.Map // job id → *atomic.Int32 (calls that saw the signal)
	var calls sync.Map
	s.handler("waiter", func(w http.ResponseWriter, req *webhook.StepRequest) {
		c, _ := calls.LoadOrStore(req.Job.ID, new(atomic.Int32))
		c.(*atomic.Int32).Add(1)
		time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond) // widen the race window
		if signalNames(req)["go"] > 0 {
			n, _ := seen.LoadOrStore(req.Job.ID, new(atomic.Int32))
			n.(*atomic.Int32).Add(1)
			webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{}})
			return
		}
		webhooktest.Answer(w, webhook.Response{Await: &webhook.Await{Signals: []string{"go"}}})
	})
	const jobs = 1000
	// Paused while a quarter of the jobs get their signal before any step runs.
	if r := s.do("PUT", "/v1/queues/default", `{"paused": true}`); r.status != 200 {
		t.Fatalf("pause: %s", r.body)
	}
	body := `{"jobs": [`
	for i := range jobs {
		if i > 0 {
			body += ","
		}
		body += `{"handler": "waiter"}`
	}
	r := s.do("POST", "/v1/jobs/batch", body+`]}`)
	var inserted struct {
		Jobs []struct {
			ID int64 `json:"id"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(r.body, &inserted); err != nil || len(inserted.Jobs) != jobs {
		t.Fatalf("batch: %d %s", r.status, r.body)
	}
	for _, j := range inserted.Jobs[:jobs/4] { // before any step: shown to the first one
		if r := s.do("POST", fmt.Sprintf("/v1/jobs/%d/signals", j.ID), `{"name": "go"}`); r.status != 202 || r.json(t)["woke"] != false {
			t.Fatalf("early signal: %d %s", r.status, r.body)
		}
	}
	var wg sync.WaitGroup
	work := make(chan int64)
	var woke, failures atomic.Int32
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				time.Sleep(time.Duration(rand.IntN(20000)) * time.Microsecond)
				r := s.do("POST", fmt.Sprintf("/v1/jobs/%d/signals", id), `{"name": "go", "payload": {"n": 1}}`)
				if r.status != 202 {
					failures.Add(1)
					if failures.Load() == 1 {
						t.Errorf("signal %d: %d %s", id, r.status, r.body)
					}
					continue
				}
				if r.json(t)["woke"] == true {
					woke.Add(1)
				}
			}
		}()
	}
	if r := s.do("PUT", "/v1/queues/default", `{"paused": false}`); r.status != 200 {
		t.Fatalf("resume: %s", r.body)
	}
	for _, j := range inserted.Jobs[jobs/4:] {
		work <- j.ID
	}
	close(work)
	wg.Wait()
	if failures.Load() > 0 {
		t.Fatalf("%d signals were refused", failures.Load())
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		n, _ := s.db.QueryInt(context.Background(), `SELECT count(*) FROM jobs WHERE status = 'done'`)
		if n == jobs {
			break
		}
		if time.Now().After(deadline) {
			left, _ := s.db.QueryStrings(context.Background(), `SELECT status, count(*) FROM jobs GROUP BY status`)
			t.Fatalf("only %d of %d jobs done; by status: %v", n, jobs, left)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var twoCalls int
	for _, j := range inserted.Jobs {
		n, ok := seen.Load(j.ID)
		if !ok || n.(*atomic.Int32).Load() != 1 {
			t.Fatalf("job %d saw its signal %v times, want exactly once", j.ID, n)
		}
		c, _ := calls.Load(j.ID)
		switch c.(*atomic.Int32).Load() {
		case 1:
		case 2:
			twoCalls++
		default:
			t.Fatalf("job %d ran %d steps, want 1 or 2 (woken once)", j.ID, c.(*atomic.Int32).Load())
		}
	}
	consumed, _ := s.db.QueryInt(context.Background(),
		`SELECT count(*) FROM jobs WHERE inbox_seq = 1 AND consumed_seq = 1 AND status = 'done'`)
	if consumed != jobs {
		t.Fatalf("%d jobs consumed exactly their one signal, want %d", consumed, jobs)
	}
	t.Logf("1000 racing signals: %d jobs parked and were woken (%d woken by the delivery itself, the rest by the park's own check); %d saw the signal in their first step",
		twoCalls, woke.Load(), jobs-twoCalls)
}

func TestSignalsByKeyAndToFinishedOrMissingJobs(t *testing.T) {
	t.Parallel()
	s := newStack(t, 30*time.Second)
	s.handler("approval", func(w http.ResponseWriter, req *webhook.StepRequest) {
		if req.Job.Step == 0 {
			webhooktest.Answer(w, webhook.Response{Await: &webhook.Await{Signals: []string{"approved"}, State: json.RawMessage(`{"asked":true}`)}})
			return
		}
		for _, sg := range req.Signals {
			if sg.Name == "approved" {
				webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{Result: sg.Payload}})
				return
			}
		}
		webhooktest.Answer(w, webhook.Response{Fail: &webhook.Fail{}})
	})
	id := s.insert(`{"handler": "approval", "key": "invoice-17"}`)
	s.waitStatus(id, "awaiting", 10*time.Second)
	r := s.do("POST", "/v1/signals", `{"key": "invoice-17", "name": "noise"}`)
	if r.status != 202 || r.json(t)["woke"] != false {
		t.Fatalf("a signal the job does not await: %d %s", r.status, r.body)
	}
	r = s.do("POST", "/v1/signals", `{"key": "invoice-17", "name": "approved", "payload": {"by": "ana"}}`)
	sent := r.json(t)
	if r.status != 202 || sent["woke"] != true || sent["job_id"] != float64(id) {
		t.Fatalf("signal by key: %d %s", r.status, r.body)
	}
	done := s.waitStatus(id, "done", 10*time.Second)
	if !webhooktest.JSONEqual(mustJSON(done["result"]), `{"by":"ana"}`) {
		t.Fatalf("result %v", done["result"])
	}
	inbox := s.do("GET", fmt.Sprintf("/v1/jobs/%d/signals", id), "").json(t)["signals"].([]any)
	if len(inbox) != 2 || inbox[0].(map[string]any)["consumed"] != true || inbox[1].(map[string]any)["seq"] != float64(2) {
		t.Fatalf("inbox %v", inbox)
	}
	if r = s.do("POST", fmt.Sprintf("/v1/jobs/%d/signals", id), `{"name": "late"}`); r.status != 409 {
		t.Fatalf("signal to a finished job: %d %s", r.status, r.body)
	}
	if r = s.do("POST", "/v1/signals", `{"key": "invoice-17", "name": "late"}`); r.status != 404 {
		t.Fatalf("signal to a key no live job holds: %d %s", r.status, r.body)
	}
	if r = s.do("POST", "/v1/jobs/424242/signals", `{"name": "x"}`); r.status != 404 {
		t.Fatalf("signal to no job: %d %s", r.status, r.body)
	}
	if n := s.count("signals"); n != 2 {
		t.Fatalf("refused signals were stored: %d rows", n)
	}
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// A parent spawns 1 000 children, one of which fails; it runs exactly once more, with
// every child's status and result.
func TestFanOutOfAThousandChildrenJoinsOnce(t *testing.T) {
	t.Parallel()
	s := newStack(t, 30*time.Second)
	s.handler("child", func(w http.ResponseWriter, req *webhook.StepRequest) {
		var in struct{ I int }
		_ = json.Unmarshal(req.Job.Input, &in)
		if in.I == 777 {
			webhooktest.Answer(w, webhook.Response{Fail: &webhook.Fail{Error: json.RawMessage(`{"message":"child 777 broke"}`)}})
			return
		}
		webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{Result: json.RawMessage(fmt.Sprintf(`{"square":%d}`, in.I*in.I))}})
	})
	var parentCalls atomic.Int32
	var joined webhook.StepRequest
	s.handler("parent", func(w http.ResponseWriter, req *webhook.StepRequest) {
		parentCalls.Add(1)
		if req.Job.Step == 0 {
			children := make([]webhook.ChildSpec, 1000)
			for i := range children {
				children[i] = webhook.ChildSpec{Handler: "child", Input: json.RawMessage(fmt.Sprintf(`{"I":%d}`, i))}
			}
			webhooktest.Answer(w, webhook.Response{Spawn: &webhook.Spawn{Children: children}})
			return
		}
		joined = *req
		webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{}})
	})
	id := s.insert(`{"handler": "parent"}`)
	s.waitStatus(id, "done", 60*time.Second)
	if parentCalls.Load() != 2 {
		t.Fatalf("the parent ran %d times, want 2", parentCalls.Load())
	}
	if joined.Wake != "children" || len(joined.Children) != 1000 || joined.ChildrenMore != 0 {
		t.Fatalf("join step: wake=%q children=%d more=%d", joined.Wake, len(joined.Children), joined.ChildrenMore)
	}
	failed, sum := 0, 0
	for _, c := range joined.Children {
		switch c.Status {
		case "failed":
			failed++
			if !webhooktest.JSONEqual(c.Error, `{"message":"child 777 broke"}`) {
				t.Fatalf("failed child's error: %s", c.Error)
			}
		case "done":
			var r struct{ Square int }
			_ = json.Unmarshal(c.Result, &r)
			sum += r.Square
		default:
			t.Fatalf("child %d is %s at the join", c.ID, c.Status)
		}
	}
	if failed != 1 || sum != 332833500-777*777 {
		t.Fatalf("join saw %d failed children and sum %d", failed, sum)
	}
	page := s.do("GET", fmt.Sprintf("/v1/jobs/%d/children?limit=500", id), "").json(t)
	if len(page["jobs"].([]any)) != 500 || page["next_cursor"] == nil {
		t.Fatalf("children listing: %d, cursor %v", len(page["jobs"].([]any)), page["next_cursor"])
	}
	if d := s.job(id); d["children_total"] != float64(1000) || d["children_finished"] != float64(1000) {
		t.Fatalf("children counts: %v %v", d["children_total"], d["children_finished"])
	}
}

func TestAwaitTimeoutFiresAndAwaitWithoutTimeoutWaits(t *testing.T) {
	t.Parallel()
	s := newStack(t, 30*time.Second)
	s.handler("patient", func(w http.ResponseWriter, req *webhook.StepRequest) {
		var in struct{ Timeout string }
		_ = json.Unmarshal(req.Job.Input, &in)
		if req.Job.Step == 0 {
			var d webhook.Duration
			_ = d.UnmarshalJSON([]byte(`"` + in.Timeout + `"`))
			webhooktest.Answer(w, webhook.Response{Await: &webhook.Await{Signals: []string{"never"}, Timeout: d}})
			return
		}
		webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{Result: json.RawMessage(fmt.Sprintf(`{"wake":%q}`, req.Wake))}})
	})
	timed := s.insert(`{"handler": "patient", "input": {"Timeout": "300ms"}}`)
	forever := s.insert(`{"handler": "patient", "input": {"Timeout": "0s"}}`)
	j := s.waitStatus(timed, "done", 10*time.Second)
	if !webhooktest.JSONEqual(mustJSON(j["result"]), `{"wake":"timeout"}`) {
		t.Fatalf("timed-out await woke with %v", j["result"])
	}
	w := s.waitStatus(forever, "awaiting", 10*time.Second)
	if w["eligible_at"] != nil {
		t.Fatalf("an await without timeout has a deadline: %v", w["eligible_at"])
	}
	// A sweep a century ahead wakes no await that has no deadline.
	far := s.eng.NewReaper(engine.ReaperConfig{Now: func() time.Time { return time.Now().AddDate(100, 0, 0) }})
	if st, err := far.Sweep(context.Background()); err != nil || st.AwaitsWoken != 0 {
		t.Fatalf("a sweep a century ahead: %+v %v", st, err)
	}
	if st := s.job(forever)["status"]; st != "awaiting" {
		t.Fatalf("an await without timeout became %v", st)
	}
	s.do("POST", fmt.Sprintf("/v1/jobs/%d/signals", forever), `{"name": "never"}`)
	j = s.waitStatus(forever, "done", 10*time.Second)
	if !webhooktest.JSONEqual(mustJSON(j["result"]), `{"wake":"signal"}`) {
		t.Fatalf("signalled await woke with %v", j["result"])
	}
}

// An asynchronous step: 202, heartbeats that move the lease on, then the outcome over
// the API; a stale token after a re-claim is refused and leaves the new attempt alone.
// Leases are long (no lease can expire under load); the one expiry the test needs is a
// reaper sweep whose clock runs ahead.
func TestAsynchronousSteps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStack(t, 30*time.Second)
	tokens := make(chan webhook.StepRequest, 10)
	s.handler("async", func(w http.ResponseWriter, req *webhook.StepRequest) {
		tokens <- *req
		w.WriteHeader(http.StatusAccepted)
	})
	id := s.insert(`{"handler": "async"}`)
	first := <-tokens
	token := first.Lease.Token
	// Each heartbeat moves the lease past the one before.
	last := first.Lease.ExpiresAt
	for range 3 {
		r := s.do("POST", fmt.Sprintf("/v1/jobs/%d/heartbeat", id), fmt.Sprintf(`{"token": %q}`, token))
		if r.status != 200 {
			t.Fatalf("heartbeat: %d %s", r.status, r.body)
		}
		at, err := time.Parse(time.RFC3339Nano, r.json(t)["lease_expires_at"].(string))
		if err != nil || !at.After(last) {
			t.Fatalf("heartbeat moved the lease from %s to %s (%v)", last, at, err)
		}
		last = at
	}
	if j := s.job(id); j["status"] != "executing" || j["attempt"] != float64(1) {
		t.Fatalf("heartbeated step: %v attempt %v", j["status"], j["attempt"])
	}
	r := s.do("POST", fmt.Sprintf("/v1/jobs/%d/outcome", id), fmt.Sprintf(`{"token": %q, "next": {"state": {"half": true}}}`, token))
	if r.status != 200 || r.json(t)["status"] != "runnable" {
		t.Fatalf("outcome: %d %s", r.status, r.body)
	}
	if r = s.do("POST", fmt.Sprintf("/v1/jobs/%d/outcome", id), fmt.Sprintf(`{"token": %q, "done": {}}`, token)); r.status != 409 {
		t.Fatalf("the same outcome twice: %d %s", r.status, r.body)
	}

	// Step 1: never heartbeated; a reaper an hour ahead finds its lease expired and the
	// step is claimed again.
	second := <-tokens
	if second.Job.Step != 1 || !webhooktest.JSONEqual(second.Job.State, `{"half":true}`) {
		t.Fatalf("second step %+v", second.Job)
	}
	ahead := s.eng.NewReaper(engine.ReaperConfig{Now: func() time.Time { return time.Now().Add(time.Hour) }})
	if st, err := ahead.Sweep(ctx); err != nil || st.Reaped != 1 {
		t.Fatalf("sweep an hour ahead: %+v %v", st, err)
	}
	third := <-tokens // the re-claim after the lease expired
	if third.Job.Step != 1 || third.Job.Attempt != 2 || third.Lease.Token == second.Lease.Token {
		t.Fatalf("re-claimed step %+v", third.Job)
	}
	r = s.do("POST", fmt.Sprintf("/v1/jobs/%d/outcome", id), fmt.Sprintf(`{"token": %q, "done": {"result": "stale"}}`, second.Lease.Token))
	if r.status != 409 || r.json(t)["type"] != "urn:gendurable:problem:lease-lost" {
		t.Fatalf("stale outcome: %d %s", r.status, r.body)
	}
	if r = s.do("POST", fmt.Sprintf("/v1/jobs/%d/heartbeat", id), fmt.Sprintf(`{"token": %q}`, second.Lease.Token)); r.status != 409 {
		t.Fatalf("stale heartbeat: %d", r.status)
	}
	if j := s.job(id); j["status"] != "executing" || j["attempt"] != float64(2) {
		t.Fatalf("the stale outcome touched the new attempt: %v", j)
	}
	r = s.do("POST", fmt.Sprintf("/v1/jobs/%d/outcome", id), fmt.Sprintf(`{"token": %q, "done": {"result": "fresh"}}`, third.Lease.Token))
	if r.status != 200 || r.json(t)["status"] != "done" {
		t.Fatalf("fresh outcome: %d %s", r.status, r.body)
	}
	if j := s.job(id); j["result"] != "fresh" {
		t.Fatalf("result %v", j["result"])
	}
	if r = s.do("POST", fmt.Sprintf("/v1/jobs/%d/outcome", id), fmt.Sprintf(`{"token": %q, "next": {}, "done": {}}`, third.Lease.Token)); r.status != 422 {
		t.Fatalf("two answers in one outcome: %d %s", r.status, r.body)
	}
	// The history says what each attempt's webhook answered: 202 for the steps whose
	// outcome came over the API, nothing for the one whose lease expired.
	var history []string
	for _, st := range s.do("GET", fmt.Sprintf("/v1/jobs/%d/steps", id), "").json(t)["steps"].([]any) {
		m := st.(map[string]any)
		history = append(history, fmt.Sprintf("%v/%v/%v", m["outcome"], m["http_status"], m["attempt"]))
	}
	if want := []string{"next/202/1", "lease_expired/<nil>/1", "done/202/2"}; fmt.Sprint(history) != fmt.Sprint(want) {
		t.Fatalf("history %v, want %v", history, want)
	}
}

func TestCancelAndRetry(t *testing.T) {
	t.Parallel()
	s := newStack(t, 30*time.Second)
	release := make(chan struct{})
	entered := make(chan int64, 10)
	s.handler("blocking", func(w http.ResponseWriter, req *webhook.StepRequest) {
		entered <- req.Job.ID
		<-release
		webhooktest.Answer(w, webhook.Response{Next: &webhook.Next{}})
	})
	running := s.insert(`{"handler": "blocking"}`)
	<-entered
	r := s.do("POST", fmt.Sprintf("/v1/jobs/%d/cancel", running), "")
	if c := r.json(t); r.status != 200 || c["status"] != "executing" || c["cancel_requested"] != true {
		t.Fatalf("cancel while executing: %d %s", r.status, r.body)
	}
	close(release)
	s.waitStatus(running, "cancelled", 10*time.Second)
	if r = s.do("POST", fmt.Sprintf("/v1/jobs/%d/cancel", running), ""); r.status != 409 {
		t.Fatalf("cancel of a cancelled job: %d", r.status)
	}

	// Cancelling a parent cancels its live children.
	s.handler("sleeper", func(w http.ResponseWriter, req *webhook.StepRequest) {
		webhooktest.Answer(w, webhook.Response{Await: &webhook.Await{Signals: []string{"wake"}}})
	})
	s.handler("family", func(w http.ResponseWriter, req *webhook.StepRequest) {
		webhooktest.Answer(w, webhook.Response{Spawn: &webhook.Spawn{Children: []webhook.ChildSpec{
			{Handler: "sleeper"}, {Handler: "sleeper"}, {Handler: "sleeper"}}}})
	})
	parent := s.insert(`{"handler": "family"}`)
	s.waitStatus(parent, "awaiting", 10*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, _ := s.db.QueryInt(context.Background(), `SELECT count(*) FROM jobs WHERE parent_id = $1 AND status = 'awaiting'`, parent)
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d children awaiting", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r = s.do("POST", fmt.Sprintf("/v1/jobs/%d/cancel", parent), ""); r.status != 200 || r.json(t)["status"] != "cancelled" {
		t.Fatalf("cancel parent: %d %s", r.status, r.body)
	}
	if n, _ := s.db.QueryInt(context.Background(), `SELECT count(*) FROM jobs WHERE parent_id = $1 AND status = 'cancelled'`, parent); n != 3 {
		t.Fatalf("%d of 3 children cancelled with their parent", n)
	}

	// Retry of a failed job: fresh attempts, same step.
	var tries atomic.Int32
	s.handler("fragile", func(w http.ResponseWriter, req *webhook.StepRequest) {
		if tries.Add(1) == 1 {
			webhooktest.Answer(w, webhook.Response{Fail: &webhook.Fail{Error: json.RawMessage(`"nope"`)}})
			return
		}
		webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{}})
	})
	fragile := s.insert(`{"handler": "fragile"}`)
	s.waitStatus(fragile, "failed", 10*time.Second)
	// The answer is runnable, or already executing when a feeder was quicker.
	if r = s.do("POST", fmt.Sprintf("/v1/jobs/%d/retry", fragile), ""); r.status != 200 || r.json(t)["status"] == "failed" {
		t.Fatalf("retry: %d %s", r.status, r.body)
	}
	s.waitStatus(fragile, "done", 10*time.Second)
	if r = s.do("POST", fmt.Sprintf("/v1/jobs/%d/retry", fragile), ""); r.status != 409 {
		t.Fatalf("retry of a done job: %d", r.status)
	}
	if r = s.do("POST", "/v1/jobs/99999/cancel", ""); r.status != 404 {
		t.Fatalf("cancel of no job: %d", r.status)
	}
}

// Statement budget: a signal is one statement; spawn, await and a child's done are one
// outcome statement each; enrichment is one statement per pick batch that needs it.
func TestStatementCountsOfAWorkflow(t *testing.T) {
	t.Parallel()
	pgtest.SkipOnCitus(t, "it counts the plain statements; on Citus a batch is a statement per shard and the counts are make bench's (docs/citus.md, \"Measured\")")
	s := newStack(t, 30*time.Second)
	s.handler("leaf", func(w http.ResponseWriter, req *webhook.StepRequest) {
		webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{}})
	})
	s.handler("flow", func(w http.ResponseWriter, req *webhook.StepRequest) {
		switch req.Job.Step {
		case 0:
			webhooktest.Answer(w, webhook.Response{Spawn: &webhook.Spawn{Children: []webhook.ChildSpec{{Handler: "leaf"}}}})
		case 1:
			webhooktest.Answer(w, webhook.Response{Await: &webhook.Await{Signals: []string{"go"}}})
		default:
			webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{}})
		}
	})
	id := s.insert(`{"handler": "flow"}`)
	s.waitStatus(id, "awaiting", 10*time.Second)
	for s.job(id)["step"] != float64(2) {
		time.Sleep(10 * time.Millisecond)
	}
	before := s.counter.Snapshot()
	s.do("POST", fmt.Sprintf("/v1/jobs/%d/signals", id), `{"name": "go"}`)
	after := s.counter.Snapshot()
	if d := after["SignalDeliver"] - before["SignalDeliver"]; d != 1 {
		t.Fatalf("a signal took %d statements", d)
	}
	s.waitStatus(id, "done", 10*time.Second)
	c := s.counter.Snapshot()
	// spawn, the child's done, await, done: four outcomes, four statements (the two
	// done by the plain statement).
	if c["JobApplyOutcomes"] != 2 || c["JobApplyPlainOutcomes"] != 2 {
		t.Fatalf("%d general and %d plain outcome statements for 2 plain and 2 other outcomes: %v",
			c["JobApplyOutcomes"], c["JobApplyPlainOutcomes"], c)
	}
	if c["ChildLoadForJoin"] != 1 || c["SignalLoadInboxes"] != 1 {
		t.Fatalf("enrichment ran %d (children) and %d (signals) times, want once each: %v",
			c["ChildLoadForJoin"], c["SignalLoadInboxes"], c)
	}
}

// A spawn of 10 000 children goes in one outcome statement, they all run, and the join
// step is shown the first 1 000 with a count of the rest: no request blows up.
func TestFanOutOfTenThousandChildren(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 10 000 children")
	}
	t.Parallel()
	s := newStack(t, 30*time.Second)
	s.handler("leaf", func(w http.ResponseWriter, req *webhook.StepRequest) {
		webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{Result: json.RawMessage(`1`)}})
	})
	var joined webhook.StepRequest
	var bodyBytes atomic.Int64
	s.handler("fan", func(w http.ResponseWriter, req *webhook.StepRequest) {
		if req.Job.Step == 0 {
			children := make([]webhook.ChildSpec, 10000)
			for i := range children {
				children[i] = webhook.ChildSpec{Handler: "leaf"}
			}
			webhooktest.Answer(w, webhook.Response{Spawn: &webhook.Spawn{Children: children}})
			return
		}
		joined = *req
		b, _ := json.Marshal(req)
		bodyBytes.Store(int64(len(b)))
		webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{}})
	})
	if r := s.do("PUT", "/v1/queues/default", `{"max_in_flight": 200, "batch": 100}`); r.status != 200 {
		t.Fatal(r.status)
	}
	id := s.insert(`{"handler": "fan"}`)
	s.waitStatus(id, "done", 120*time.Second)
	if len(joined.Children) != 1000 || joined.ChildrenMore != 9000 || joined.Wake != "children" {
		t.Fatalf("join step: %d children shown, %d more, wake %q", len(joined.Children), joined.ChildrenMore, joined.Wake)
	}
	if d := s.job(id); d["children_total"] != float64(10000) || d["children_finished"] != float64(10000) {
		t.Fatalf("children counts %v/%v", d["children_finished"], d["children_total"])
	}
	t.Logf("10 000 children joined; the join step's request was %d bytes", bodyBytes.Load())
}
