package dispatch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/dispatch"
	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
	"github.com/gendurable/gendurable/webhook"
)

// tenantLoad is a webhook that counts each fairness key's steps in flight (the key is
// in the job's input) and answers done once its key's gate lets it.
type tenantLoad struct {
	mu       sync.Mutex
	cond     *sync.Cond
	inFlight map[string]int
	most     map[string]int
	done     map[string]int
	// held keys' calls wait until released
	held map[string]bool
	// seen, for each call of key `during` made while that key surely had runnable rows
	// left (more of its duringJobs not yet called than the slots), the most steps of
	// key `watched` in flight
	watched, during   string
	duringJobs, slots int
	mostWhile         int
	// calls the dispatcher gave up on while they were held (a test fails on any)
	abandoned int
}

func newTenantLoad(held ...string) *tenantLoad {
	l := &tenantLoad{inFlight: map[string]int{}, most: map[string]int{}, done: map[string]int{}, held: map[string]bool{}}
	l.cond = sync.NewCond(&l.mu)
	for _, k := range held {
		l.held[k] = true
	}
	return l
}

// respond is the tenants' handler: it counts each key's steps in flight, holds a key's
// steps while the test holds it, and takes a little time over each step.
func (l *tenantLoad) respond() func(http.ResponseWriter, *webhook.StepRequest) {
	return func(w http.ResponseWriter, req *webhook.StepRequest) {
		var in struct {
			Key string `json:"key"`
		}
		_ = json.Unmarshal(req.Job.Input, &in)
		l.mu.Lock()
		l.inFlight[in.Key]++
		l.most[in.Key] = max(l.most[in.Key], l.inFlight[in.Key])
		// A call can reach the handler well after its claim on a busy machine, when
		// its key's last rows are already claimed and the key has left its share to
		// the others: such a call says nothing about the share. While more of the
		// key's jobs are uncalled than the slots, some are runnable in the database,
		// and were at every claim before (nothing turns back to runnable here).
		if in.Key == l.during && l.duringJobs-l.done[in.Key]-l.inFlight[in.Key] > l.slots {
			l.mostWhile = max(l.mostWhile, l.inFlight[l.watched])
		}
		l.cond.Broadcast()
		// A held call waits for its release, or for the dispatcher to give up on it (a
		// call it abandoned must not count as in flight, nor keep the server from closing).
		ctx := reqContext(w)
		stop := context.AfterFunc(ctx, func() { l.mu.Lock(); l.cond.Broadcast(); l.mu.Unlock() })
		defer stop()
		for l.held[in.Key] && ctx.Err() == nil {
			l.cond.Wait()
		}
		if ctx.Err() != nil {
			l.inFlight[in.Key]--
			l.abandoned++
			l.cond.Broadcast()
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		time.Sleep(2 * time.Millisecond) // a step takes a little time: claims overlap calls
		l.mu.Lock()
		l.inFlight[in.Key]--
		l.done[in.Key]++
		l.cond.Broadcast()
		l.mu.Unlock()
		answer(w, webhook.Response{Done: &webhook.Done{}})
	}
}

// waitFor waits until cond holds (under the lock) or the deadline passes.
func (l *tenantLoad) waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.AfterFunc(timeout, func() { l.mu.Lock(); l.cond.Broadcast(); l.mu.Unlock() })
	defer deadline.Stop()
	start := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for !cond() {
		if time.Since(start) > timeout {
			t.Fatalf("waited %v for %s: in flight %v, done %v, calls given up %d", timeout, what, l.inFlight, l.done, l.abandoned)
		}
		l.cond.Wait()
	}
}

// release lets key's held calls go.
func (l *tenantLoad) release(key string) {
	l.mu.Lock()
	l.held[key] = false
	l.cond.Broadcast()
	l.mu.Unlock()
}

// releaseAll lets every held call go.
func (l *tenantLoad) releaseAll() {
	l.mu.Lock()
	clear(l.held)
	l.cond.Broadcast()
	l.mu.Unlock()
}

// fairJobs are n jobs of key in queue "fair", the key also in their input.
func fairJobs(key string, n int) []engine.NewJob {
	jobs := make([]engine.NewJob, n)
	for i := range jobs {
		jobs[i] = engine.NewJob{Handler: "tenant", Queue: "fair", FairnessKey: &key,
			Input: json.RawMessage(fmt.Sprintf(`{"key":%q}`, key))}
	}
	return jobs
}

// fairHarness is a fair queue "fair" whose handler is load's webhook, with maxInFlight
// slots a process, and the engines of n server processes on one database.
func fairHarness(t *testing.T, load *tenantLoad, maxInFlight, processes int) (*harness, []*engine.Engine) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	db := pgtest.Open(t, url, pg.Options{MaxConns: 20})
	rr := pg.FairnessRoundRobin
	if _, err := db.QueueUpsert(context.Background(), pg.QueueUpsert{Name: "fair", Fairness: &rr,
		MaxInFlight: &maxInFlight, Batch: ptr(50)}); err != nil {
		t.Fatal(err)
	}
	first := db
	var engines []*engine.Engine
	for i := range processes {
		if i > 0 {
			db = pgtest.Open(t, url, pg.Options{MaxConns: 20})
		}
		eng, err := engine.New(db, engine.Config{LeaseTTL: time.Minute, Owner: fmt.Sprintf("process-%d", i)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		engines = append(engines, eng)
	}
	h := &harness{db: first, eng: engines[0], dbURL: url}
	// The calls of a held key wait for the test: a call timeout far past the test's own.
	timeout := int((10 * time.Minute).Milliseconds())
	if _, err := first.HandlerUpsert(context.Background(), pg.HandlerUpsert{Name: "tenant",
		URL: newReceiver(t, load.respond()).URL, Secret: ptr(testSecret), TimeoutMS: &timeout}); err != nil {
		t.Fatal(err)
	}
	// Cleanups run last first: the held calls are let go before the receiver closes.
	t.Cleanup(load.releaseAll)
	return h, engines
}

// A key's cap holds across three server processes, and the uncapped key runs beside it.
func TestFairQueueCapsAKeyAcrossThreeProcesses(t *testing.T) {
	t.Parallel()
	load := newTenantLoad()
	h, engines := fairHarness(t, load, 20, 3)
	if _, err := h.eng.SetFairnessKey(context.Background(), "fair", "capped", nil, ptr(2)); err != nil {
		t.Fatal(err)
	}
	h.insert(t, fairJobs("capped", 60)...)
	h.insert(t, fairJobs("free", 60)...)
	for _, eng := range engines {
		startDispatcher(t, eng, dispatch.Config{})
	}
	load.waitFor(t, "every job to finish", 60*time.Second, func() bool {
		return load.done["capped"] == 60 && load.done["free"] == 60
	})
	if load.most["capped"] > 2 {
		t.Fatalf("the key capped at 2 had %d steps in flight at once", load.most["capped"])
	}
	if load.most["free"] <= 2 {
		t.Fatalf("the uncapped key never had more than %d in flight: the cap leaked to it", load.most["free"])
	}
}

// A key whose handler is slow holds its share of a process's slots, not the slots its
// finished neighbours leave; once the others have no work, its share is all the slots.
func TestFairQueueKeepsASlowKeyToItsShare(t *testing.T) {
	t.Parallel()
	load := newTenantLoad("slow")
	load.watched, load.during, load.duringJobs, load.slots = "slow", "fast", 200, 10
	h, engines := fairHarness(t, load, 10, 1)
	h.insert(t, fairJobs("slow", 40)...)
	h.insert(t, fairJobs("fast", 200)...)
	startDispatcher(t, engines[0], dispatch.Config{})
	load.waitFor(t, "the fast key's jobs to finish", 60*time.Second, func() bool { return load.done["fast"] == 200 })
	// Two keys with work, 10 slots: 5 each. While fast had work, slow held at most 5.
	load.mu.Lock()
	while := load.mostWhile
	load.mu.Unlock()
	if while == 0 {
		t.Fatal("no call of the fast key was seen while it had work: the share was not measured")
	}
	if while > 5 {
		t.Fatalf("the slow key held %d of 10 slots while the fast key had work; its share is 5", while)
	}
	// A key with no work leaves its share: slow alone fills all 10 slots.
	load.waitFor(t, "the slow key to fill every slot", 30*time.Second, func() bool { return load.inFlight["slow"] == 10 })
	load.release("slow")
	load.waitFor(t, "the slow key's jobs to finish", 60*time.Second, func() bool { return load.done["slow"] == 40 })
	load.mu.Lock()
	defer load.mu.Unlock()
	if load.abandoned > 0 {
		t.Fatalf("the dispatcher gave up on %d held calls: the counts above are not the slots'", load.abandoned)
	}
}
