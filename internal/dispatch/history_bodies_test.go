package dispatch_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/dispatch"
	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
	"github.com/gendurable/gendurable/internal/webhooktest"
)

// bodiesHandler is a real webhook that answers the first attempt of every job 500 with a
// body, and `done` after that; it records the request bodies it was sent, in order.
type bodiesHandler struct {
	mu       sync.Mutex
	requests [][]byte
}

func (b *bodiesHandler) serve(_ http.Header, body []byte, w http.ResponseWriter) {
	b.mu.Lock()
	b.requests = append(b.requests, bytes.Clone(body))
	b.mu.Unlock()
	if bytes.Contains(body, []byte(`"attempt":1,`)) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"error":"database unavailable","trace":"` + strings.Repeat("x", 40) + `"}`))
		return
	}
	_, _ = w.Write([]byte(`{"done":{"result":{"ok":true}}}`))
}

func (b *bodiesHandler) sent() [][]byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.requests
}

// runBodiesJob runs one job on a queue with the given step_bodies setting (nil: the
// default) against a handler that fails its first attempt, and answers its history.
func runBodiesJob(t *testing.T, cfg engine.Config, setting *string) ([]engine.StepAttempt, [][]byte) {
	t.Helper()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	eng, err := engine.New(db, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{db: db, eng: eng}
	recorder := &bodiesHandler{}
	h.handler(t, "flaky", webhooktest.NewRaw(t, recorder.serve), 3)
	if _, err := eng.SetQueue(ctx, "bodies", engine.QueueSettings{StepBodies: setting}); err != nil {
		t.Fatal(err)
	}
	job := h.insert(t, engine.NewJob{Handler: "flaky", Queue: "bodies", Input: []byte(`{"user":7}`)})[0]
	startDispatcher(t, eng, dispatch.Config{Queues: []string{"bodies"}})
	waitJob(t, db, job.ID, 10*time.Second, hasStatus("done"))
	steps, err := eng.ListSteps(ctx, job.ID, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 2 || steps[0].Outcome != "http_error" || steps[1].Outcome != "done" {
		t.Fatalf("history: %+v", steps)
	}
	return steps, recorder.sent()
}

// The default ("failures"): the failed attempt keeps the request we sent, byte for byte,
// and the handler's 500 body; the attempt that ended done keeps nothing.
func TestHistoryKeepsTheBodiesOfAFailedAttempt(t *testing.T) {
	t.Parallel()
	steps, sent := runBodiesJob(t, engine.Config{LeaseTTL: 30 * time.Second}, nil)
	b := steps[0].Bodies
	if b == nil || b.Request == nil || b.Response == nil {
		t.Fatalf("the failed attempt kept no bodies: %+v", b)
	}
	if b.Request.Text != string(sent[0]) || b.Request.Size != len(sent[0]) || b.Request.Truncated {
		t.Fatalf("request kept:\n%s\nsent:\n%s", b.Request.Text, sent[0])
	}
	if !strings.Contains(b.Response.Text, `"error":"database unavailable"`) || b.Response.Truncated {
		t.Fatalf("response kept: %+v", b.Response)
	}
	if strings.Contains(b.Request.Text, "v1,") || strings.Contains(b.Request.Text, testSecret) {
		t.Fatalf("the request kept holds a signature or the secret: %s", b.Request.Text)
	}
	if steps[1].Bodies != nil {
		t.Fatalf("a done attempt kept bodies under the default setting: %+v", steps[1].Bodies)
	}
}

// "all" keeps the done attempt's bodies too; "off" keeps none, not even the failure's.
func TestHistoryBodiesFollowTheQueueSetting(t *testing.T) {
	t.Parallel()
	t.Run("all", func(t *testing.T) {
		t.Parallel()
		steps, sent := runBodiesJob(t, engine.Config{LeaseTTL: 30 * time.Second}, ptr(engine.StepBodiesAll))
		for i, s := range steps {
			if s.Bodies == nil || s.Bodies.Request == nil || s.Bodies.Request.Text != string(sent[i]) {
				t.Fatalf("attempt %d kept: %+v", i, s.Bodies)
			}
		}
		if got := steps[1].Bodies.Response.Text; got != `{"done":{"result":{"ok":true}}}` {
			t.Fatalf("the done attempt's answer kept: %s", got)
		}
	})
	t.Run("off", func(t *testing.T) {
		t.Parallel()
		steps, _ := runBodiesJob(t, engine.Config{LeaseTTL: 30 * time.Second}, ptr(engine.StepBodiesOff))
		for i, s := range steps {
			if s.Bodies != nil {
				t.Fatalf("attempt %d kept bodies on a queue set off: %+v", i, s.Bodies)
			}
		}
	})
}

// Bodies over the server's cap are kept cut to it and marked truncated, with their size.
func TestHistoryBodiesAreCapped(t *testing.T) {
	t.Parallel()
	steps, sent := runBodiesJob(t, engine.Config{LeaseTTL: 30 * time.Second, StepBodyCap: 32}, nil)
	b := steps[0].Bodies
	if b == nil || b.Request == nil || b.Response == nil {
		t.Fatalf("no bodies kept: %+v", b)
	}
	if !b.Request.Truncated || b.Request.Text != string(sent[0][:32]) || b.Request.Size != len(sent[0]) {
		t.Fatalf("request kept: %+v (sent %d bytes)", b.Request, len(sent[0]))
	}
	if !b.Response.Truncated || len(b.Response.Text) != 32 || b.Response.Size <= 32 {
		t.Fatalf("response kept: %+v", b.Response)
	}
}

// A call that got no answer (the handler hangs past its timeout) keeps the request and
// no response.
func TestHistoryBodiesOfATimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, 30*time.Second)
	release := make(chan struct{})
	url := webhooktest.NewRaw(t, func(_ http.Header, _ []byte, w http.ResponseWriter) { <-release })
	t.Cleanup(func() { close(release) }) // before the server's Close, which waits for its handlers
	maxAttempts, tmo := 1, 100
	if _, err := h.db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "slow", URL: url, Secret: ptr(testSecret),
		MaxAttempts: &maxAttempts, TimeoutMS: &tmo}); err != nil {
		t.Fatal(err)
	}
	job := h.insert(t, engine.NewJob{Handler: "slow", Queue: "slowq"})[0]
	startDispatcher(t, h.eng, dispatch.Config{Queues: []string{"slowq"}})
	waitJob(t, h.db, job.ID, 10*time.Second, hasStatus("failed"))
	steps, err := h.eng.ListSteps(ctx, job.ID, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 1 || steps[0].Outcome != "timeout" || steps[0].Bodies == nil ||
		steps[0].Bodies.Request == nil || steps[0].Bodies.Response != nil {
		t.Fatalf("history: %+v", steps)
	}
}

// An answer over the dispatcher's response cap is not read: its history row keeps the
// request, and a response marked truncated, empty, of at least the cap's size.
func TestHistoryBodiesOfAnAnswerOverTheCap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, 30*time.Second)
	url := webhooktest.NewRaw(t, func(_ http.Header, _ []byte, w http.ResponseWriter) {
		_, _ = w.Write(bytes.Repeat([]byte("x"), 4096))
	})
	h.handler(t, "chatty", url, 1)
	job := h.insert(t, engine.NewJob{Handler: "chatty", Queue: "chattyq"})[0]
	startDispatcher(t, h.eng, dispatch.Config{Queues: []string{"chattyq"}, MaxBodyBytes: 1024})
	waitJob(t, h.db, job.ID, 10*time.Second, hasStatus("failed"))
	steps, err := h.eng.ListSteps(ctx, job.ID, 10)
	if err != nil || len(steps) != 1 || steps[0].Outcome != "response_too_large" || steps[0].Bodies == nil {
		t.Fatalf("history: %+v (%v)", steps, err)
	}
	b := steps[0].Bodies
	if b.Request == nil || b.Response == nil || b.Response.Text != "" || !b.Response.Truncated || b.Response.Size != 1024 {
		t.Fatalf("bodies: request %+v, response %+v", b.Request, b.Response)
	}
}
