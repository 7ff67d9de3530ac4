package dispatch_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gendurable/gendurable/internal/dispatch"
	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/webhook"
)

// A handler that sends itself an unrelated signal and then awaits "go" stays parked: an
// await is woken early only by a signal it names. (Before the fix every job got past the
// await with wake "signal" and no "go".)
func TestAwaitIsNotWokenByAnotherSignalDuringItsStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, 30*time.Second)
	var mu sync.Mutex
	resumed := map[int64]webhook.StepRequest{}
	rcv := newReceiver(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		id := req.Job.ID
		if req.Job.Step == 0 {
			if _, err := h.eng.Signal(ctx, engine.SignalTarget{JobID: &id}, "noise", nil); err != nil {
				t.Error(err)
			}
			answer(w, webhook.Response{Await: &webhook.Await{Signals: []string{"go"}}})
			return
		}
		mu.Lock()
		resumed[id] = *req
		mu.Unlock()
		answer(w, webhook.Response{Done: &webhook.Done{}})
	})
	h.handler(t, "h", rcv.URL, 3)
	jobs := make([]engine.NewJob, 50)
	for i := range jobs {
		jobs[i] = engine.NewJob{Handler: "h"}
	}
	inserted := h.insert(t, jobs...)
	startDispatcher(t, h.eng, dispatch.Config{})
	for _, j := range inserted {
		waitJob(t, h.db, j.ID, 30*time.Second, hasStatus("awaiting"))
	}
	mu.Lock()
	early := len(resumed)
	mu.Unlock()
	if early != 0 {
		t.Fatalf("%d of %d jobs got past an await for \"go\" without it", early, len(inserted))
	}
	for _, j := range inserted {
		if _, err := h.eng.Signal(ctx, engine.SignalTarget{JobID: &j.ID}, "go", json.RawMessage(`{"n":1}`)); err != nil {
			t.Fatal(err)
		}
	}
	for _, j := range inserted {
		waitJob(t, h.db, j.ID, 30*time.Second, hasStatus("done"))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, j := range inserted {
		req := resumed[j.ID]
		var names []string
		for _, s := range req.Signals {
			names = append(names, s.Name)
		}
		if req.Wake != "signal" || !slices.Contains(names, "go") {
			t.Fatalf("job %d resumed with wake %q and signals %v", j.ID, req.Wake, names)
		}
	}
}

// Children spawned into a queue that nothing created run, and their parent joins them.
// (Before the fix the queue had no row, no feeder served it, and the parent waited forever.)
func TestChildrenSpawnedIntoANewQueueRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 30*time.Second)
	rcv := newReceiver(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		switch {
		case req.Job.Handler == "child":
			answer(w, webhook.Response{Done: &webhook.Done{Result: json.RawMessage(`"child done"`)}})
		case req.Job.Step == 0:
			answer(w, webhook.Response{Spawn: &webhook.Spawn{Children: []webhook.ChildSpec{
				{Handler: "child", Queue: "spawned-elsewhere"}, {Handler: "child", Queue: "spawned-elsewhere"}}}})
		default:
			if len(req.Children) != 2 || req.Children[0].Status != "done" {
				answer(w, webhook.Response{Fail: &webhook.Fail{Error: json.RawMessage(`"join saw the wrong children"`)}})
				return
			}
			answer(w, webhook.Response{Done: &webhook.Done{}})
		}
	})
	h.handler(t, "parent", rcv.URL, 3)
	h.handler(t, "child", rcv.URL, 3)
	parent := h.insert(t, engine.NewJob{Handler: "parent"})[0]
	startDispatcher(t, h.eng, dispatch.Config{})
	waitJob(t, h.db, parent.ID, 30*time.Second, hasStatus("done"))
}

// A resumed queue runs at once: a settings change is NOTIFYed to every dispatcher, which
// reloads then rather than at its next periodic reload (here an hour away). Under the
// bench the one-second reload made a resumed drain wait up to a second.
func TestResumedQueueRunsWithoutWaitingForTheReload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, 30*time.Second)
	rcv := doneReceiver(t)
	h.handler(t, "h", rcv.URL, 3)
	paused, running := true, false
	if _, err := h.eng.SetQueue(ctx, "default", engine.QueueSettings{Paused: &paused}); err != nil {
		t.Fatal(err)
	}
	job := h.insert(t, engine.NewJob{Handler: "h"})[0]
	seen := make(chan struct{}, 1)
	startDispatcher(t, h.eng, dispatch.Config{PollMin: 10 * time.Millisecond, PollMax: 100 * time.Millisecond,
		QueueRefresh: time.Hour, OnPaused: func(string) {
			select {
			case seen <- struct{}{}:
			default:
			}
		}})
	select { // the first (and, for an hour, only) reload found the queue paused
	case <-seen:
	case <-time.After(30 * time.Second):
		t.Fatal("the feeder never saw its queue paused")
	}
	if _, err := h.eng.SetQueue(ctx, "default", engine.QueueSettings{Paused: &running}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, h.db, job.ID, 30*time.Second, hasStatus("done"))
}

// A lost LISTEN connection is reported (metric) and reconnected: a notice after the
// reconnect still wakes the feeder, which otherwise would poll only once an hour here.
func TestListenConnectionLossIsReportedAndReconnected(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, 30*time.Second)
	rcv := doneReceiver(t)
	h.handler(t, "h", rcv.URL, 3)
	first := h.insert(t, engine.NewJob{Handler: "h"})[0] // creates the queue
	metrics := dispatch.NewMetrics(nil)
	d := dispatch.New(h.eng, dispatch.Config{PollMin: time.Hour, PollMax: time.Hour, QueueRefresh: time.Hour}, nil, metrics)
	d.Start(ctx)
	t.Cleanup(func() { d.Stop(ctx) })
	waitJob(t, h.db, first.ID, 30*time.Second, hasStatus("done"))
	// Terminate the dispatcher's LISTEN session until the loss is counted.
	for deadline := time.Now().Add(30 * time.Second); testutil.ToFloat64(metrics.ListenErrors) == 0; time.Sleep(20 * time.Millisecond) {
		if _, err := h.db.Exec(ctx, `-- probe
			SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND query LIKE 'LISTEN %' AND pid <> pg_backend_pid()`); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the lost LISTEN connection was never reported")
		}
	}
	// Reconnected: wait until a LISTEN session exists again, then a new job's NOTIFY runs it.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		n, err := h.db.QueryInt(ctx, `-- probe
			SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %'`)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the dispatcher never listened again")
		}
	}
	second := h.insert(t, engine.NewJob{Handler: "h"})[0]
	waitJob(t, h.db, second.ID, 30*time.Second, hasStatus("done"))
}

// A handler that spawns a child under a key a live job holds gets a failed attempt, retried
// by its policy and failed at the last one, with the key named; the other jobs of the
// process run meanwhile. (The refused spawn used to loop in the engine: the step stayed
// executing and its outcome statements ran until the completer gave up.)
func TestSpawnOfAHeldKeyFailsItsAttemptsAndNothingElse(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 30*time.Second)
	rcv := newReceiver(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		if req.Job.Handler == "spawner" {
			answer(w, webhook.Response{Spawn: &webhook.Spawn{Children: []webhook.ChildSpec{{Handler: "plain", Key: "held"}}}})
			return
		}
		answer(w, webhook.Response{Done: &webhook.Done{}})
	})
	h.handler(t, "spawner", rcv.URL, 2)
	h.handler(t, "plain", rcv.URL, 2)
	held := "held"
	holder := h.insert(t, engine.NewJob{Handler: "plain", Queue: "unserved", Key: &held})[0]
	spawner := h.insert(t, engine.NewJob{Handler: "spawner"})[0]
	startDispatcher(t, h.eng, dispatch.Config{Queues: []string{"default"}})
	plain := h.insert(t, engine.NewJob{Handler: "plain"})[0]
	waitJob(t, h.db, plain.ID, 30*time.Second, hasStatus("done"))
	j := waitJob(t, h.db, spawner.ID, 30*time.Second, hasStatus("failed"))
	if j.Attempt != 2 || !strings.Contains(string(j.Error), `the key \"held\"`) {
		t.Fatalf("the spawner failed at attempt %d with %s; want attempt 2 naming the key", j.Attempt, j.Error)
	}
	if j, _ := h.db.JobGet(context.Background(), holder.ID); j.Status != "runnable" {
		t.Fatalf("the key's holder: %s", j.Status)
	}
}
