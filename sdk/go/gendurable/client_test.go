package gendurable_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg/pgtest"
	"github.com/gendurable/gendurable/sdk/go/gendurable"
	"github.com/gendurable/gendurable/sdk/go/gendurabletest"
	"github.com/gendurable/gendurable/webhook"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const secret = "whsec_Z2VuZHVyYWJsZS1nby1zZGstdGVzdC1zZWNyZXQ="

// start runs a real server on its own database and answers a client of it.
func start(t *testing.T) (*gendurable.Client, *gendurabletest.Server) {
	t.Helper()
	srv := gendurabletest.Start(t, pgtest.NewDatabase(t))
	c, err := gendurable.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return c, srv
}

// register points handler name at a webhook.Handler running fn.
func register(t *testing.T, c *gendurable.Client, name string, fn webhook.StepFunc) {
	t.Helper()
	hook := httptest.NewServer(webhook.Handler(secret, fn))
	t.Cleanup(hook.Close)
	registerURL(t, c, name, hook.URL)
}

func registerURL(t *testing.T, c *gendurable.Client, name, url string) {
	t.Helper()
	sec := secret
	r, err := c.PutHandlerWithResponse(context.Background(), name, gendurable.HandlerPut{Url: url, Secret: &sec})
	if err == nil {
		err = gendurable.CheckResponse(r.HTTPResponse, r.Body)
	}
	if err != nil {
		t.Fatalf("register %s: %v", name, err)
	}
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// stepOutcomes lists the outcomes of a job's history in order.
func stepOutcomes(t *testing.T, c *gendurable.Client, id int64) []string {
	t.Helper()
	r, err := c.ListJobStepsWithResponse(context.Background(), id, nil)
	if err != nil || r.JSON200 == nil {
		t.Fatalf("steps of %d: %v %s", id, err, r.Body)
	}
	var out []string
	for _, s := range r.JSON200.Steps {
		out = append(out, s.Outcome)
	}
	return out
}

// sameJSON reports whether raw encodes the same value as want.
func sameJSON(raw []byte, want string) bool {
	var a, b any
	return json.Unmarshal(raw, &a) == nil && json.Unmarshal([]byte(want), &b) == nil && fmt.Sprint(a) == fmt.Sprint(b)
}

// The README quickstart through the Go SDK: a greeter of three steps carrying a count in
// its state, inserted with Insert and followed with Wait.
func TestQuickstart(t *testing.T) {
	t.Parallel()
	c, srv := start(t)
	ctx := waitCtx(t)
	register(t, c, "greeter", func(_ context.Context, req *webhook.StepRequest) webhook.Response {
		if req.Job.Step < 2 {
			return webhook.Response{Next: &webhook.Next{State: json.RawMessage(fmt.Sprintf(`{"steps":%d}`, req.Job.Step+1))}}
		}
		var in struct{ Name string }
		_ = json.Unmarshal(req.Job.Input, &in)
		return webhook.Response{Done: &webhook.Done{Result: *gendurable.JSON(map[string]string{"greeting": "hello, " + in.Name})}}
	})
	job, err := c.Insert(ctx, gendurable.JobInsert{Handler: "greeter", Input: gendurable.JSON(map[string]string{"name": "Ada"})})
	if err != nil {
		t.Fatal(err)
	}
	if job.Deduplicated || job.Status != "runnable" {
		t.Fatalf("inserted %+v", job)
	}
	done, err := c.Wait(ctx, job.Id)
	if err != nil {
		t.Fatalf("%v\n%s", err, srv.Logs())
	}
	if done.Status != "done" || done.Step != 3 || !sameJSON(done.Result, `{"greeting": "hello, Ada"}`) {
		t.Fatalf("job after the quickstart: status %s step %d result %s", done.Status, done.Step, done.Result)
	}
	if got := fmt.Sprint(stepOutcomes(t, c, job.Id)); got != "[next next done]" {
		t.Fatalf("history %s\n%s", got, srv.Logs())
	}
}

// The approval flow of docs/protocol.md: spawn a notify child, await a signal sent by
// key, done with the decision; the batch insert and the dedup on a live key on the way.
func TestApprovalFlow(t *testing.T) {
	t.Parallel()
	c, srv := start(t)
	ctx := waitCtx(t)
	register(t, c, "notify", func(context.Context, *webhook.StepRequest) webhook.Response {
		return webhook.Response{Done: &webhook.Done{Result: json.RawMessage(`{"sent":true}`)}}
	})
	register(t, c, "expense", func(_ context.Context, req *webhook.StepRequest) webhook.Response {
		switch {
		case req.Job.Step == 0:
			return webhook.Response{Spawn: &webhook.Spawn{Children: []webhook.ChildSpec{{Handler: "notify", Input: req.Job.Input}}}}
		case req.Wake == "children":
			if len(req.Children) != 1 || req.Children[0].Status != "done" {
				return webhook.Response{Fail: &webhook.Fail{Error: json.RawMessage(`{"message":"notify did not finish"}`)}}
			}
			return webhook.Response{Await: &webhook.Await{Signals: []string{"approved", "rejected"}, Timeout: webhook.Duration(time.Hour)}}
		}
		for _, s := range req.Signals {
			if s.Name == "approved" || s.Name == "rejected" {
				return webhook.Response{Done: &webhook.Done{Result: *gendurable.JSON(map[string]any{"decision": s.Name, "by": s.Payload})}}
			}
		}
		return webhook.Response{Await: &webhook.Await{Signals: []string{"approved", "rejected"}}}
	})

	key := "expense-1001"
	jobs, err := c.InsertBatch(ctx, []gendurable.JobInsert{
		{Handler: "expense", Key: &key, Input: gendurable.JSON(map[string]any{"amount": 420})},
		{Handler: "expense", Key: &key, Input: gendurable.JSON(map[string]any{"amount": 999})},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 || jobs[1].Id != jobs[0].Id || !jobs[1].Deduplicated {
		t.Fatalf("a batch of two inserts with one key: %+v", jobs)
	}
	id := jobs[0].Id
	// "awaiting" is also the status of a parent waiting for its children: wait for the signals.
	parked, err := c.Wait(ctx, id, "awaiting")
	for err == nil && parked.Awaiting == nil {
		time.Sleep(20 * time.Millisecond) // parked on its children, a poll away from the await
		parked, err = c.Wait(ctx, id, "awaiting")
	}
	if err != nil {
		t.Fatalf("%v\n%s", err, srv.Logs())
	}
	if parked.Awaiting == nil || fmt.Sprint(*parked.Awaiting) != "[approved rejected]" || parked.ChildrenFinished != 1 {
		t.Fatalf("parked job: awaiting %v, children finished %d", parked.Awaiting, parked.ChildrenFinished)
	}
	sent, err := c.SignalByKey(ctx, key, "approved", map[string]string{"name": "ana"})
	if err != nil {
		t.Fatal(err)
	}
	if !sent.Woke || sent.JobId != id {
		t.Fatalf("signal answer %+v", sent)
	}
	done, err := c.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var result struct {
		Decision string
		By       struct{ Name string }
	}
	_ = json.Unmarshal(done.Result, &result)
	if done.Status != "done" || result.Decision != "approved" || result.By.Name != "ana" {
		t.Fatalf("finished as %s with %s", done.Status, done.Result)
	}
	if got := fmt.Sprint(stepOutcomes(t, c, id)); got != "[spawn await done]" {
		t.Fatalf("history %s", got)
	}
	// A finished job refuses signals with a typed conflict.
	if _, err := c.Signal(ctx, id, "approved", nil); !gendurable.IsProblem(err, gendurable.ProblemConflict) {
		t.Fatalf("signal to a done job: %v", err)
	}
}

// Bad input answers typed problems that name the field, and write nothing.
func TestProblems(t *testing.T) {
	t.Parallel()
	c, _ := start(t)
	ctx := context.Background()
	priority := 12
	_, err := c.Insert(ctx, gendurable.JobInsert{Handler: "greeter", Priority: &priority})
	var p *gendurable.ProblemError
	if !gendurable.IsProblem(err, gendurable.ProblemValidation) || !errors.As(err, &p) || p.Status != 422 {
		t.Fatalf("priority 12: %v", err)
	}
	if _, ok := p.FieldErrors()["priority"]; !ok {
		t.Fatalf("the problem does not name priority: %v", p.FieldErrors())
	}
	if _, err := c.Get(ctx, 424242); !gendurable.IsProblem(err, gendurable.ProblemNotFound) {
		t.Fatalf("a missing job: %v", err)
	}
	if _, err := c.SignalByKey(ctx, "nobody", "approved", nil); !gendurable.IsProblem(err, gendurable.ProblemNotFound) {
		t.Fatalf("a signal to a missing key: %v", err)
	}
	r, err := c.ListJobsWithResponse(ctx, nil)
	if err != nil || r.JSON200 == nil || len(r.JSON200.Jobs) != 0 {
		t.Fatalf("jobs after refused inserts: %v %s", err, r.Body)
	}
}

// An asynchronous step: the webhook answers 202, the test heartbeats and completes it
// with the lease token; a stale token is a typed lease-lost problem.
func TestAsynchronousStep(t *testing.T) {
	t.Parallel()
	c, _ := start(t)
	ctx := waitCtx(t)
	steps := make(chan webhook.StepRequest, 1)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhook.Verify(secret, r.Header, body, 0); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var req webhook.StepRequest
		_ = json.Unmarshal(body, &req)
		steps <- req
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(hook.Close)
	registerURL(t, c, "report", hook.URL)
	job, err := c.Insert(ctx, gendurable.JobInsert{Handler: "report"})
	if err != nil {
		t.Fatal(err)
	}
	var step webhook.StepRequest
	select {
	case step = <-steps:
	case <-ctx.Done():
		t.Fatal("the step never reached the webhook")
	}
	until, err := c.Heartbeat(ctx, job.Id, step.Lease.Token)
	if err != nil || !until.After(time.Now()) {
		t.Fatalf("heartbeat: %v, until %v", err, until)
	}
	stale := "00000000-0000-4000-8000-000000000000"
	if _, err := c.CompleteStep(ctx, job.Id, stale, webhook.Response{Done: &webhook.Done{}}); !gendurable.IsProblem(err, gendurable.ProblemLeaseLost) {
		t.Fatalf("outcome with a stale token: %v", err)
	}
	applied, err := c.CompleteStep(ctx, job.Id, step.Lease.Token, webhook.Response{Done: &webhook.Done{Result: json.RawMessage(`{"rows":3}`)}})
	if err != nil || applied.Status != "done" {
		t.Fatalf("outcome: %v %+v", err, applied)
	}
	got, err := c.Get(ctx, job.Id)
	if err != nil || !sameJSON(got.Result, `{"rows": 3}`) {
		t.Fatalf("job after the outcome: %v %s", err, got.Result)
	}
}
