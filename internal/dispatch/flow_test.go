package dispatch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg/pgtest"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gendurable/gendurable/internal/dispatch"
	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/webhook"
)

// concurrency tracks how many steps per key run at once in a receiver.
type concurrency struct {
	mu      sync.Mutex
	running map[string]int
	most    map[string]int
	total   int
	mostAll int
}

func newConcurrency() *concurrency {
	return &concurrency{running: map[string]int{}, most: map[string]int{}}
}

func (c *concurrency) enter(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running[key]++
	c.total++
	c.most[key] = max(c.most[key], c.running[key])
	c.mostAll = max(c.mostAll, c.total)
}

func (c *concurrency) leave(key string) {
	c.mu.Lock()
	c.running[key]--
	c.total--
	c.mu.Unlock()
}

func (c *concurrency) max(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.most[key]
}

// keyedReceiver answers done after hold, recording concurrency by the job's input "k".
func keyedReceiver(t *testing.T, c *concurrency, hold time.Duration) *receiver {
	return newReceiver(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		k := string(req.Job.Input)
		c.enter(k)
		time.Sleep(hold)
		c.leave(k)
		answer(w, webhook.Response{Done: &webhook.Done{}})
	})
}

// waitDone waits until at least n jobs are done.
// citusSlower is how long a flow that waits d on plain PostgreSQL may take on Citus: four
// times as long. Each step of a flow that runs its steps one after another (a K=1 key, a
// gate, a bucket) is a claim and an outcome through the coordinator to a worker, with the
// three nodes sharing the two cores of a CI machine with the other tests (docs/citus.md,
// "Measured"). What the flows check is what runs, not how fast: a regression in speed
// shows in make bench.
func citusSlower(d time.Duration) time.Duration {
	if pgtest.Citus() {
		return 4 * d
	}
	return d
}

func waitDone(t *testing.T, db *pg.DB, total int64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		n, err := db.QueryInt(context.Background(), `SELECT count(*) FROM jobs WHERE status = 'done'`)
		if err != nil {
			t.Fatal(err)
		}
		if n >= total {
			return
		}
		if time.Now().After(deadline) {
			rows, _ := db.QueryStrings(context.Background(), `SELECT status, count(*) FROM jobs GROUP BY 1`)
			t.Fatalf("%d of %d jobs done after %s: %v", n, total, timeout, rows)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A gate of limit 3: the webhook never sees more than 3 steps of the key at once, across
// two engines, and the slot counters never hit their CHECK.
func TestGateCapsConcurrencyAcrossEngines(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, engB := twoEngines(t)
	db, engA := h.db, h.eng
	c := newConcurrency()
	rcv := keyedReceiver(t, c, 30*time.Millisecond)
	h.handler(t, "h", rcv.URL, 3)
	if _, err := engA.SetGate(ctx, "tenant-1", 3, 2); err != nil {
		t.Fatal(err)
	}
	var jobs []engine.NewJob
	for i := range 40 {
		k := "tenant-1"
		if i%4 == 0 {
			k = "tenant-2" // an ungated key alongside: K=1
		}
		jobs = append(jobs, engine.NewJob{Handler: "h", ConcurrencyKey: &k, Input: []byte(`"` + k + `"`)})
	}
	h.insert(t, jobs...)
	mA, mB := dispatch.NewMetrics(nil), dispatch.NewMetrics(nil)
	for _, x := range []struct {
		e *engine.Engine
		m *dispatch.Metrics
	}{{engA, mA}, {engB, mB}} {
		d := dispatch.New(x.e, dispatch.Config{PollMin: 5 * time.Millisecond, PollMax: 50 * time.Millisecond,
			QueueRefresh: 50 * time.Millisecond}, nil, x.m)
		d.Start(ctx)
		t.Cleanup(func() { d.Stop(ctx) })
	}
	waitDone(t, db, 40, citusSlower(30*time.Second))
	if got := c.max(`"tenant-1"`); got != 3 {
		t.Fatalf("tenant-1 (gate of 3) peaked at %d concurrent steps, want exactly 3", got)
	}
	if got := c.max(`"tenant-2"`); got != 1 {
		t.Fatalf("tenant-2 (ungated) peaked at %d concurrent steps, want 1", got)
	}
	if n := testutil.ToFloat64(mA.PickContended.WithLabelValues("default")) + testutil.ToFloat64(mB.PickContended.WithLabelValues("default")); n > 0 {
		t.Logf("%v picks retried after a concurrency-key race (the unique index settled them)", n)
	}
	g, err := db.GateGet(ctx, "tenant-1")
	if err != nil || g.Available != 3 {
		t.Fatalf("after the drain the gate has %d of 3 slots free (%v)", g.Available, err)
	}
}

// A holder that dies gives its slot back when its lease expires (the reaper credits it),
// and the reconciler repairs a counter that went wrong.
func TestGateSlotsComeBackAfterACrash(t *testing.T) {
	t.Parallel()
	pgtest.SkipOnCitus(t, "it repairs plain PostgreSQL's gate counters; on Citus a slot is an index entry that ends with its step, and the reconciler has nothing to repair")
	ctx := context.Background()
	h := newHarness(t, time.Hour)
	h.handler(t, "h", "http://127.0.0.1:1/", 5)
	if _, err := h.eng.SetGate(ctx, "k", 2, 1); err != nil {
		t.Fatal(err)
	}
	k := "k"
	for range 3 {
		h.insert(t, engine.NewJob{Handler: "h", ConcurrencyKey: &k})
	}
	steps, _, err := h.eng.Claim(ctx, "default", 10)
	if err != nil || len(steps) != 2 {
		t.Fatalf("a gate of 2 admitted %d of 3 (%v)", len(steps), err)
	}
	if g, _ := h.db.GateGet(ctx, "k"); g.Available != 0 {
		t.Fatalf("available %d after admitting 2", g.Available)
	}
	// The process holding both dies. Once the leases expire (the reaper's clock is past
	// them) the reaper takes the steps back and returns the slots.
	if st, err := h.eng.NewReaper(engine.ReaperConfig{}).Sweep(ctx); err != nil || st.Reaped != 0 {
		t.Fatalf("reaped %d leases an hour before they expire (%v)", st.Reaped, err)
	}
	ahead := h.eng.NewReaper(engine.ReaperConfig{Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
	if st, err := ahead.Sweep(ctx); err != nil || st.Reaped != 2 {
		t.Fatalf("reaped %d (%v)", st.Reaped, err)
	}
	if g, _ := h.db.GateGet(ctx, "k"); g.Available != 2 {
		t.Fatalf("available %d after the reaper, want 2", g.Available)
	}
	// A counter that drifted (here: edited by hand) is repaired from the executing rows.
	// Re-claim one step (the reaper backed the others off a few ms): 1 slot free.
	var again []engine.Step
	for deadline := time.Now().Add(5 * time.Second); len(again) == 0; {
		again, _, err = h.eng.Claim(ctx, "default", 1)
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("re-claim: %d %v", len(again), err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := h.db.Exec(ctx, `UPDATE gate_slots SET available = 0`); err != nil {
		t.Fatal(err)
	}
	repaired, err := h.eng.NewReconciler(engine.ReconcilerConfig{}).Repair(ctx)
	if err != nil || len(repaired) != 1 || repaired[0].Available != 2-len(again) {
		t.Fatalf("reconciler repaired %+v (%v), want available = 2 - %d executing", repaired, err, len(again))
	}
}

// Conservation: rate 0, burst 5, 100 fresh keys × 10 jobs, 8 concurrent pickers: exactly
// 5 granted per key and every bucket left at 0 tokens.
func TestRateLimitConservation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, time.Minute)
	h.handler(t, "h", "http://127.0.0.1:1/", 5)
	if _, err := h.eng.SetRateLimit(ctx, "api", 0, 5); err != nil {
		t.Fatal(err)
	}
	// Round-robin over the keys, as a multi-tenant stream arrives. (Inserted key by key,
	// the denied rows of the first keys would fill every 50-row window: the known
	// denied-head pathology of docs/flow-control.md.)
	var jobs []engine.NewJob
	for range 10 {
		for k := range 100 {
			jobs = append(jobs, engine.NewJob{Handler: "h", RateLimit: &engine.RateLimitRef{Name: "api", Key: fmt.Sprintf("key-%03d", k)}})
		}
	}
	h.insert(t, jobs...)
	var wg sync.WaitGroup
	var granted, contended atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for empty := 0; empty < 3; {
				steps, c, err := h.eng.Claim(ctx, "default", 50)
				contended.Add(int64(c))
				if err != nil {
					t.Error(err)
					return
				}
				granted.Add(int64(len(steps)))
				if len(steps) == 0 {
					empty++
				}
			}
		}()
	}
	wg.Wait()
	if granted.Load() != 500 {
		t.Fatalf("granted %d, want exactly 500 (5 per key)", granted.Load())
	}
	rows, err := h.db.QueryStrings(ctx, `SELECT count(*), min(n), max(n) FROM (SELECT rate_key, count(*) n FROM jobs WHERE status = 'executing' GROUP BY 1) x`)
	if err != nil || rows[0][0] != "100" || rows[0][1] != "5" || rows[0][2] != "5" {
		t.Fatalf("grants per key (keys, min, max) = %v", rows)
	}
	rows, err = h.db.QueryStrings(ctx, `SELECT count(*), max(tokens) FROM rate_buckets`)
	if err != nil || rows[0][0] != "100" || rows[0][1] != "0" {
		t.Fatalf("buckets (count, max tokens) = %v", rows)
	}
	t.Logf("conservation: 500 granted over 100 keys; %d claims retried after a bucket-mint race", contended.Load())
}

// A rate of 20/s with burst 1 spaces grants by at least 1/rate.
func TestRateLimitSpacesGrants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, 30*time.Second)
	rcv := doneReceiver(t)
	h.handler(t, "h", rcv.URL, 3)
	if _, err := h.eng.SetRateLimit(ctx, "slow", 20, 1); err != nil {
		t.Fatal(err)
	}
	jobs := make([]engine.NewJob, 100)
	for i := range jobs {
		jobs[i] = engine.NewJob{Handler: "h", RateLimit: &engine.RateLimitRef{Name: "slow", Key: "one"}}
	}
	h.insert(t, jobs...)
	started := time.Now()
	startDispatcher(t, h.eng, dispatch.Config{PollMin: 10 * time.Millisecond, PollMax: 200 * time.Millisecond, QueueRefresh: 50 * time.Millisecond})
	waitDone(t, h.db, 100, citusSlower(30*time.Second))
	took := time.Since(started)
	rows, err := h.db.QueryStrings(ctx, `SELECT extract(epoch FROM attempted_at)::float8 FROM jobs ORDER BY attempted_at`)
	if err != nil {
		t.Fatal(err)
	}
	var at []float64
	for _, r := range rows {
		var f float64
		_, _ = fmtSscan(r[0], &f)
		at = append(at, f)
	}
	sort.Float64s(at)
	for i := 1; i < len(at); i++ {
		if gap := at[i] - at[i-1]; gap < 0.049 {
			t.Fatalf("grants %d and %d only %.1f ms apart (rate 20/s allows one per 50 ms)", i-1, i, gap*1000)
		}
	}
	if span := at[len(at)-1] - at[0]; span < 4.9 || took > citusSlower(15*time.Second) {
		t.Fatalf("100 grants at 20/s spanned %.2fs (drain %s), want ≈ 4.95s", span, took)
	}
	t.Logf("rate 20/s, burst 1: 100 jobs drained in %s", took.Round(10*time.Millisecond))
}

// A rate limit shared by jobs that their concurrency keys spread (on Citus over the
// shards, the bucket on one of them: a remote bucket that each claimer debits before the
// call, docs/citus.md "Rate limits") binds them all: 40 jobs at 20/s, burst 1, across two
// engines, take at least 39/20 s from the first call to the last (less what one call's
// dispatch may lag its debit), and every job runs once, on its first attempt (a step its
// bucket could not pay for is given back uncounted).
func TestRateLimitSharedAcrossConcurrencyKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, engB := twoEngines(t)
	var mu sync.Mutex
	var calls []time.Time
	rcv := newReceiver(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		mu.Lock()
		calls = append(calls, time.Now())
		mu.Unlock()
		answer(w, webhook.Response{Done: &webhook.Done{}})
	})
	h.handler(t, "h", rcv.URL, 3)
	if _, err := h.eng.SetRateLimit(ctx, "shared", 20, 1); err != nil {
		t.Fatal(err)
	}
	jobs := make([]engine.NewJob, 40)
	for i := range jobs {
		jobs[i] = engine.NewJob{Handler: "h", ConcurrencyKey: ptr(fmt.Sprintf("customer-%d", i)),
			RateLimit: &engine.RateLimitRef{Name: "shared"}}
	}
	h.insert(t, jobs...)
	cfg := dispatch.Config{PollMin: 10 * time.Millisecond, PollMax: 200 * time.Millisecond, QueueRefresh: 50 * time.Millisecond}
	startDispatcher(t, h.eng, cfg)
	startDispatcher(t, engB, cfg)
	waitDone(t, h.db, 40, citusSlower(30*time.Second))
	rows, err := h.db.QueryStrings(ctx, `SELECT count(*) FILTER (WHERE attempt = 1), count(*) FROM jobs`)
	if err != nil || rows[0][0] != "40" || rows[0][1] != "40" {
		t.Fatalf("jobs done on their first attempt, of all: %v %v, want 40 of 40", rows, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 40 {
		t.Fatalf("%d calls, want 40 (one per job)", len(calls))
	}
	slices.SortFunc(calls, func(a, b time.Time) int { return a.Compare(b) })
	t.Logf("40 calls at 20/s, burst 1, over %d concurrency keys: first to last %s", len(calls), calls[len(calls)-1].Sub(calls[0]).Round(time.Millisecond))
	if span := calls[len(calls)-1].Sub(calls[0]); span < 1450*time.Millisecond {
		t.Fatalf("40 calls at 20/s, burst 1, spanned %s: the shared bucket did not bind (want ≥ 1.95 s less a call's lag)", span)
	}
}

// K=1: 50 jobs on one concurrency key never overlap (across two engines); two keys run
// side by side.
func TestConcurrencyKeyRunsOneAtATime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, engB := twoEngines(t)
	db, engA := h.db, h.eng
	c := newConcurrency()
	rcv := keyedReceiver(t, c, 5*time.Millisecond)
	h.handler(t, "h", rcv.URL, 3)
	var jobs []engine.NewJob
	for i := range 100 {
		k := "a"
		if i%2 == 1 {
			k = "b"
		}
		jobs = append(jobs, engine.NewJob{Handler: "h", ConcurrencyKey: &k, Input: []byte(`"` + k + `"`)})
	}
	h.insert(t, jobs...)
	startDispatcher(t, engA, dispatch.Config{PollMin: 2 * time.Millisecond, PollMax: 20 * time.Millisecond})
	startDispatcher(t, engB, dispatch.Config{PollMin: 2 * time.Millisecond, PollMax: 20 * time.Millisecond})
	waitDone(t, db, 100, citusSlower(30*time.Second))
	if c.max(`"a"`) != 1 || c.max(`"b"`) != 1 {
		t.Fatalf("a key ran %d / %d steps at once, want 1", c.max(`"a"`), c.max(`"b"`))
	}
	if c.mostAll != 2 {
		t.Fatalf("keys a and b never ran side by side (peak %d)", c.mostAll)
	}
	_ = ctx
}

// K=1 holds for the children of many parents: 12 parents each spawn two children of key
// "a", two of key "b" and one without, run by two engines (as two server processes); no
// key ever runs two steps at once, and every parent's next step is shown its five
// children done. On Citus a child of a key lives at the key's placement, away from its
// parent (docs/citus.md, "A child away from its parent"), and the reaper's turn carries
// its end to its parent.
func TestSpawnedChildrenKeepTheirConcurrencyKeysAcrossParents(t *testing.T) {
	t.Parallel()
	h, engB := twoEngines(t)
	c := newConcurrency()
	kids := keyedReceiver(t, c, 5*time.Millisecond)
	h.handler(t, "h", kids.URL, 3)
	var mu sync.Mutex
	joined := map[int64]int{} // parent: children shown done at its join
	parents := newReceiver(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		if req.Job.Step == 0 {
			answer(w, webhook.Response{Spawn: &webhook.Spawn{Children: []webhook.ChildSpec{
				{Handler: "h", ConcurrencyKey: "a", Input: json.RawMessage(`"a"`)},
				{Handler: "h", ConcurrencyKey: "b", Input: json.RawMessage(`"b"`)},
				{Handler: "h", ConcurrencyKey: "a", Input: json.RawMessage(`"a"`)},
				{Handler: "h", ConcurrencyKey: "b", Input: json.RawMessage(`"b"`)},
				{Handler: "h", Input: json.RawMessage(`"none"`)}}}})
			return
		}
		done := 0
		for _, ch := range req.Children {
			if ch.Status == "done" {
				done++
			}
		}
		mu.Lock()
		joined[req.Job.ID] = done
		mu.Unlock()
		answer(w, webhook.Response{Done: &webhook.Done{}})
	})
	h.handler(t, "parent", parents.URL, 3)
	jobs := make([]engine.NewJob, 12)
	for i := range jobs {
		jobs[i] = engine.NewJob{Handler: "parent"}
	}
	h.insert(t, jobs...)
	for _, eng := range []*engine.Engine{h.eng, engB} {
		r := eng.NewReaper(engine.ReaperConfig{Interval: 100 * time.Millisecond})
		r.Start(context.Background())
		t.Cleanup(r.Stop)
		startDispatcher(t, eng, dispatch.Config{PollMin: 2 * time.Millisecond, PollMax: 20 * time.Millisecond})
	}
	waitDone(t, h.db, 12*6, citusSlower(30*time.Second))
	if c.max(`"a"`) != 1 || c.max(`"b"`) != 1 {
		t.Fatalf("a key ran %d / %d steps at once, want 1", c.max(`"a"`), c.max(`"b"`))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(joined) != 12 {
		t.Fatalf("%d parents ran after their children, want 12", len(joined))
	}
	for parent, done := range joined {
		if done != 5 {
			t.Errorf("parent %d was shown %d children done, want 5", parent, done)
		}
	}
}

// Jobs with a key and a concurrency key: each key has one live job (a repeat answers it),
// each concurrency key runs one step at a time, and a key is free again once its job is
// done. On Citus the job lives at its concurrency key's placement and its key is displaced
// (docs/citus.md, "Displaced keys").
func TestKeyedJobsWithConcurrencyKeys(t *testing.T) {
	t.Parallel()
	h, engB := twoEngines(t)
	c := newConcurrency()
	rcv := keyedReceiver(t, c, 2*time.Millisecond)
	h.handler(t, "h", rcv.URL, 3)
	jobs := make([]engine.NewJob, 20)
	for i := range jobs {
		ck := []string{"a", "b"}[i%2]
		jobs[i] = engine.NewJob{Handler: "h", Key: ptr(fmt.Sprintf("order-%d", i)), ConcurrencyKey: &ck, Input: []byte(`"` + ck + `"`)}
	}
	first := h.insert(t, jobs...)
	again := h.insert(t, jobs...)
	for i := range first {
		if first[i].Deduplicated || !again[i].Deduplicated || again[i].ID != first[i].ID {
			t.Fatalf("job %d: inserted %d (deduplicated %v), again %d (deduplicated %v): want one job per key",
				i, first[i].ID, first[i].Deduplicated, again[i].ID, again[i].Deduplicated)
		}
	}
	startDispatcher(t, h.eng, dispatch.Config{PollMin: 2 * time.Millisecond, PollMax: 20 * time.Millisecond})
	startDispatcher(t, engB, dispatch.Config{PollMin: 2 * time.Millisecond, PollMax: 20 * time.Millisecond})
	waitDone(t, h.db, 20, citusSlower(30*time.Second))
	if c.max(`"a"`) != 1 || c.max(`"b"`) != 1 {
		t.Fatalf("a concurrency key ran %d / %d steps at once, want 1", c.max(`"a"`), c.max(`"b"`))
	}
	// Done, the keys are free: the same inserts make new jobs.
	for i, j := range h.insert(t, jobs[:2]...) {
		if j.Deduplicated || j.ID == first[i].ID {
			t.Fatalf("an insert of a finished job's key answered %d (deduplicated %v), want a new job", j.ID, j.Deduplicated)
		}
	}
}

// With 1 000 low-priority jobs queued, an urgent insert is claimed by the next pick.
func TestUrgentJobJumpsTheQueue(t *testing.T) {
	t.Parallel()
	pgtest.SkipOnCitus(t, "priorities order claims within a shard; a claim takes the shards in turn (docs/citus.md)")
	ctx := context.Background()
	h := newHarness(t, 30*time.Second)
	// The first ten calls block until the urgent job is in: no pick can happen meanwhile
	// (every slot is taken), so the next pick is the first that can see it.
	release := make(chan struct{})
	var entered atomic.Int32
	rcv := newReceiver(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		entered.Add(1)
		<-release
		answer(w, webhook.Response{Done: &webhook.Done{}})
	})
	h.handler(t, "h", rcv.URL, 3)
	if _, err := h.db.QueueUpsert(ctx, pg.QueueUpsert{Name: "default", MaxInFlight: ptr(10), Batch: ptr(10)}); err != nil {
		t.Fatal(err)
	}
	low := make([]engine.NewJob, 1000)
	for i := range low {
		low[i] = engine.NewJob{Handler: "h", Priority: ptr(9)}
	}
	h.insert(t, low...)
	startDispatcher(t, h.eng, dispatch.Config{})
	for deadline := time.Now().Add(30 * time.Second); entered.Load() < 10; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of the first 10 calls arrived", entered.Load())
		}
	}
	urgent := h.insert(t, engine.NewJob{Handler: "h", Priority: ptr(0)})[0]
	close(release)
	j := waitJob(t, h.db, urgent.ID, 30*time.Second, hasStatus("done"))
	ahead, _ := h.db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE priority = 9 AND attempted_at < $1`, *j.AttemptedAt)
	if ahead != 10 {
		t.Fatalf("%d low-priority jobs were claimed before the urgent one; only the 10 running when it was inserted may be", ahead)
	}
}

// Queue settings apply to running dispatchers without a restart: max_in_flight caps the
// concurrent steps and a raise is picked up; a pause stops claiming, a resume restarts it.
func TestQueueSettingsApplyWithoutRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, 30*time.Second)
	c := newConcurrency()
	rcv := keyedReceiver(t, c, 40*time.Millisecond)
	h.handler(t, "h", rcv.URL, 3)
	if _, err := h.db.QueueUpsert(ctx, pg.QueueUpsert{Name: "default", MaxInFlight: ptr(1), Batch: ptr(10)}); err != nil {
		t.Fatal(err)
	}
	jobs := make([]engine.NewJob, 60)
	for i := range jobs {
		jobs[i] = engine.NewJob{Handler: "h", Input: []byte(`"q"`)}
	}
	h.insert(t, jobs...)
	paused := make(chan struct{}, 1)
	startDispatcher(t, h.eng, dispatch.Config{PollMin: 5 * time.Millisecond, PollMax: 50 * time.Millisecond, QueueRefresh: 50 * time.Millisecond,
		OnPaused: func(string) {
			select {
			case paused <- struct{}{}:
			default:
			}
		}})
	waitDone(t, h.db, 5, 20*time.Second)
	if got := c.max(`"q"`); got != 1 {
		t.Fatalf("max_in_flight 1 ran %d steps at once", got)
	}
	if _, err := h.db.QueueUpsert(ctx, pg.QueueUpsert{Name: "default", MaxInFlight: ptr(4)}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, h.db, 25, 20*time.Second)
	if got := c.max(`"q"`); got != 4 {
		t.Fatalf("after raising max_in_flight to 4 the peak was %d", got)
	}
	if _, err := h.db.QueueUpsert(ctx, pg.QueueUpsert{Name: "default", Paused: ptr(true)}); err != nil {
		t.Fatal(err)
	}
	select { // the feeder has seen the pause: it claims nothing more
	case <-paused:
	case <-time.After(30 * time.Second):
		t.Fatal("the feeder never saw its queue paused")
	}
	// The steps it had claimed finish; then nothing moves (a change is a claim while paused).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if running, _ := h.db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE status = 'executing'`); running == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("steps still executing on a paused queue")
		}
	}
	before, _ := h.db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE attempted_at IS NOT NULL`)
	for range 3 { // three more paused rounds of the feeder
		<-paused
	}
	if after, _ := h.db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE attempted_at IS NOT NULL`); after != before {
		t.Fatalf("a paused queue kept claiming: %d -> %d jobs attempted", before, after)
	}
	if _, err := h.db.QueueUpsert(ctx, pg.QueueUpsert{Name: "default", Paused: ptr(false)}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, h.db, 60, 20*time.Second)
}
