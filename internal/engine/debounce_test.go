package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// debounceClock is the time the engine's debounced inserts count from, set by the test.
type debounceClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *debounceClock) set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }
func (c *debounceClock) get() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func debounced(key string, period, maxWait time.Duration) *engine.Debounce {
	return &engine.Debounce{Key: key, Period: period, MaxWait: maxWait}
}

func wantEligible(t *testing.T, what string, got engine.JobInserted, want time.Time) {
	t.Helper()
	if got.EligibleAt == nil || !got.EligibleAt.Equal(want) {
		t.Fatalf("%s: eligible_at %v, want %v", what, got.EligibleAt, want)
	}
}

// Inserts of one debounce key collapse into the pending job: each gives it its input and
// pushes it to a period from the insert, never past max_wait after the first; once the
// job is claimed, the next insert makes a new job. Time is the engine's injected clock.
func TestDebounceCollapsesInsertsIntoThePendingJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := &debounceClock{}
	te := newTestEngine(t, engine.Config{IdempotencyClock: clock.get})
	// Two hours ago, so that the job is due (and claimable) at the end.
	t0 := time.Now().Add(-2 * time.Hour).Truncate(time.Millisecond)
	insert := func(at time.Duration, input string) engine.JobInserted {
		t.Helper()
		clock.set(t0.Add(at))
		got, err := te.InsertJob(ctx, engine.NewJob{Handler: "h", Input: json.RawMessage(input),
			Debounce: debounced("user-7", 5*time.Second, time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	first := insert(0, `{"n": 1}`)
	if first.Debounced || first.DebounceKey == nil || *first.DebounceKey != "user-7" {
		t.Fatalf("first insert: debounced %v, key %v; want a new job holding user-7", first.Debounced, first.DebounceKey)
	}
	wantEligible(t, "first insert", first, t0.Add(5*time.Second))

	second := insert(4*time.Second, `{"n": 2}`)
	if !second.Debounced || second.ID != first.ID || string(second.Input) != `{"n": 2}` {
		t.Fatalf("second insert: debounced %v, job %d (want %d), input %s", second.Debounced, second.ID, first.ID, second.Input)
	}
	wantEligible(t, "insert 4 s later", second, t0.Add(9*time.Second))

	// 58 s after the first: a period from now would be 63 s, past max_wait (60 s).
	third := insert(58*time.Second, `{"n": 3}`)
	if !third.Debounced || third.ID != first.ID {
		t.Fatalf("third insert: debounced %v, job %d, want job %d", third.Debounced, third.ID, first.ID)
	}
	wantEligible(t, "insert near max_wait", third, t0.Add(time.Minute))

	// Another key is another job.
	clock.set(t0)
	other, err := te.InsertJob(ctx, engine.NewJob{Handler: "h", Debounce: debounced("user-8", time.Second, 0)})
	if err != nil || other.Debounced || other.ID == first.ID {
		t.Fatalf("another key: %+v %v", other, err)
	}

	// Due now (t0 is two hours ago): the claim takes both, with the latest input.
	steps, _, err := te.Claim(ctx, "default", 10)
	if err != nil || len(steps) != 2 {
		t.Fatalf("claimed %d steps (%v), want the two debounced jobs", len(steps), err)
	}
	for _, s := range steps {
		if s.ID == first.ID && string(s.Input) != `{"n": 3}` {
			t.Fatalf("the step runs with input %s, want the latest {\"n\": 3}", s.Input)
		}
	}
	// Claimed: the key's next insert makes a new job.
	fourth := insert(2*time.Hour, `{"n": 4}`)
	if fourth.Debounced || fourth.ID == first.ID {
		t.Fatalf("insert after the claim: debounced %v, job %d; want a new job", fourth.Debounced, fourth.ID)
	}
	wantEligible(t, "insert after the claim", fourth, t0.Add(2*time.Hour+5*time.Second))
	if n, err := te.db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE debounce_key = 'user-7'`); err != nil || n != 2 {
		t.Fatalf("%d jobs hold user-7 (%v), want 2: the claimed one and the new one", n, err)
	}
}

// Without max_wait, every insert pushes the job back a full period.
func TestDebounceWithoutMaxWaitKeepsPushing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := &debounceClock{}
	te := newTestEngine(t, engine.Config{IdempotencyClock: clock.get})
	t0 := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	var got engine.JobInserted
	for i := range 5 {
		clock.set(t0.Add(time.Duration(i) * time.Minute))
		var err error
		if got, err = te.InsertJob(ctx, engine.NewJob{Handler: "h", Debounce: debounced("k", 90*time.Second, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	if !got.Debounced {
		t.Fatalf("fifth insert: debounced %v", got.Debounced)
	}
	wantEligible(t, "fifth insert, 4 min after the first", got, t0.Add(4*time.Minute+90*time.Second))
}

// In one batch, items of one debounce key collapse too: the first makes the job, the
// others answer it debounced, and the job holds the last item's input.
func TestDebounceCollapsesWithinABatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	item := func(key, input string) engine.NewJob {
		return engine.NewJob{Handler: "h", Input: json.RawMessage(input), Debounce: debounced(key, time.Hour, 0)}
	}
	got, err := te.InsertJobs(ctx, []engine.NewJob{item("a", `1`), {Handler: "h"}, item("a", `2`), item("b", `3`), item("a", `4`)})
	if err != nil {
		t.Fatal(err)
	}
	flags := []bool{got[0].Debounced, got[1].Debounced, got[2].Debounced, got[3].Debounced, got[4].Debounced}
	if !slices.Equal(flags, []bool{false, false, true, false, true}) {
		t.Fatalf("debounced flags %v, want [false false true false true]", flags)
	}
	if got[0].ID != got[2].ID || got[0].ID != got[4].ID || got[3].ID == got[0].ID || got[1].ID == got[0].ID {
		t.Fatalf("jobs %d %d %d %d %d: want items 0, 2 and 4 on one job", got[0].ID, got[1].ID, got[2].ID, got[3].ID, got[4].ID)
	}
	for _, i := range []int{0, 2, 4} {
		if string(got[i].Input) != `4` {
			t.Fatalf("item %d answers input %s, want the last item's 4", i, got[i].Input)
		}
	}
	// A second batch collapses into the pending jobs.
	again, err := te.InsertJobs(ctx, []engine.NewJob{item("b", `5`), item("a", `6`)})
	if err != nil || !again[0].Debounced || !again[1].Debounced || again[0].ID != got[3].ID || again[1].ID != got[0].ID {
		t.Fatalf("second batch: %+v %v", again, err)
	}
	if n, err := te.db.QueryInt(ctx, `SELECT count(*) FROM jobs`); err != nil || n != 3 {
		t.Fatalf("%d jobs (%v), want 3", n, err)
	}
}

// 32 goroutines inserting one debounce key at once make one job; exactly one of them
// is told it made it.
func TestDebounceConcurrentInsertsMakeOneJob(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, engine.Config{})
	insertAtOnceMakesOneJob(t, te, 32, func(int) engine.NewJob {
		return engine.NewJob{Handler: "h", Input: json.RawMessage(`{"g": 1}`), Debounce: debounced("hot", time.Hour, 0)}
	})
}

// insertAtOnceMakesOneJob runs n inserts of debounce key "hot" at once (job(g) is the
// g-th) and fails t unless they made one job, which every insert answers and exactly one
// was told it made.
func insertAtOnceMakesOneJob(t *testing.T, te testEngine, n int, job func(g int) engine.NewJob) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	var made atomic.Int64
	ids := make([]int64, n)
	start := make(chan struct{})
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			got, err := te.InsertJob(ctx, job(g))
			if err != nil {
				t.Error(err)
				return
			}
			ids[g] = got.ID
			if !got.Debounced {
				made.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	if n, err := te.db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE debounce_key = 'hot'`); err != nil || n != 1 {
		t.Fatalf("%d jobs hold the key (%v), want 1", n, err)
	}
	if made.Load() != 1 {
		t.Fatalf("%d inserts answered debounced: false, want exactly 1", made.Load())
	}
	for g, id := range ids {
		if id != ids[0] {
			t.Fatalf("insert %d answered job %d, insert 0 job %d", g, id, ids[0])
		}
	}
}

// A debounce that cannot work is refused, naming the field; nothing is written.
func TestDebounceRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	key, delay, now := "k", time.Second, time.Now()
	cases := []struct {
		job   engine.NewJob
		field string
	}{
		{engine.NewJob{Handler: "h", Debounce: debounced("", time.Second, 0)}, "debounce/key"},
		{engine.NewJob{Handler: "h", Debounce: debounced("d", 0, 0)}, "debounce/period"},
		{engine.NewJob{Handler: "h", Debounce: debounced("d", time.Second, -time.Second)}, "debounce/max_wait"},
		{engine.NewJob{Handler: "h", Key: &key, Debounce: debounced("d", time.Second, 0)}, "debounce"},
		{engine.NewJob{Handler: "h", IdempotencyKey: &key, Debounce: debounced("d", time.Second, 0)}, "debounce"},
		{engine.NewJob{Handler: "h", Delay: &delay, Debounce: debounced("d", time.Second, 0)}, "debounce"},
		{engine.NewJob{Handler: "h", RunAt: &now, Debounce: debounced("d", time.Second, 0)}, "debounce"},
		{engine.NewJob{Handler: "nope", Debounce: debounced("d", time.Second, 0)}, "handler"},
	}
	for _, c := range cases {
		_, err := te.InsertJob(ctx, c.job)
		if got := fieldsOf(t, err); !slices.Equal(got, []string{c.field}) {
			t.Errorf("%+v: refused fields %v, want [%s]", c.job.Debounce, got, c.field)
		}
	}
	if n, err := te.db.QueryInt(ctx, `SELECT count(*) FROM jobs`); err != nil || n != 0 {
		t.Fatalf("refusals wrote %d jobs (%v)", n, err)
	}
}

// Debounced inserts racing claims of the key's job: no insert fails (an insert that
// waited for a claim makes a new job instead of colliding), every job is made by exactly
// one insert that answered debounced: false, and at most one job of the key is ever
// pending (claimed jobs keep the key without holding it).
func TestDebounceInsertsRacingClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	var wg sync.WaitGroup
	var made, answered atomic.Int64
	stop := make(chan struct{})
	claimed := make(chan int, 1)
	go func() { // the claimer: a job is due a millisecond after it is made
		n := 0
		for {
			select {
			case <-stop:
				claimed <- n
				return
			default:
			}
			steps, _, err := te.Claim(ctx, "default", 10)
			if err != nil {
				t.Error(err)
			}
			n += len(steps)
		}
	}()
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				got, err := te.InsertJob(ctx, engine.NewJob{Handler: "h", Debounce: debounced("racy", time.Millisecond, 0)})
				if err != nil {
					t.Error(err)
					return
				}
				answered.Add(1)
				if !got.Debounced {
					made.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	n := <-claimed
	jobs, err := te.db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE debounce_key = 'racy'`)
	if err != nil {
		t.Fatal(err)
	}
	pending, err := te.db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE debounce_key = 'racy' AND attempted_at IS NULL`)
	if err != nil {
		t.Fatal(err)
	}
	if answered.Load() != 400 || made.Load() != jobs || pending > 1 {
		t.Fatalf("400 inserts: %d answered, %d made a job, %d jobs hold the key, %d pending; want 400, jobs = made, ≤ 1 pending",
			answered.Load(), made.Load(), jobs, pending)
	}
	t.Logf("400 debounced inserts racing a claimer: %d jobs made, %d claimed meanwhile", jobs, n)
}

// A debounce key beside a concurrency key: the inserts of one debounce key collapse into
// its one pending job whatever concurrency key each names (or none), and that job keeps
// the concurrency key of the insert that made it. On Citus the job lives at its
// concurrency key's placement, away from its debounce key's, and the key's holder row
// finds it (docs/citus.md, "Displaced keys").
func TestDebounceBesideAConcurrencyKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := &debounceClock{}
	te := newTestEngine(t, engine.Config{IdempotencyClock: clock.get})
	t0 := time.Now().Add(-2 * time.Hour).Truncate(time.Millisecond)
	clock.set(t0)
	insert := func(concurrencyKey string, input string) engine.JobInserted {
		t.Helper()
		j := engine.NewJob{Handler: "h", Input: json.RawMessage(input), Debounce: debounced("sync-acme", 5*time.Second, 0)}
		if concurrencyKey != "" {
			j.ConcurrencyKey = &concurrencyKey
		}
		got, err := te.InsertJob(ctx, j)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	first := insert("acme", `{"n": 1}`)
	if first.Debounced || first.ConcurrencyKey == nil || *first.ConcurrencyKey != "acme" {
		t.Fatalf("first insert: debounced %v, concurrency key %v; want a new job of acme", first.Debounced, first.ConcurrencyKey)
	}
	if pgtest.Citus() && first.ID%pg.Placements != int64(pg.PlacementOfKey("acme")) {
		t.Fatalf("job %d lives at %d, want its concurrency key's placement %d", first.ID, first.ID%pg.Placements, pg.PlacementOfKey("acme"))
	}
	for i, ck := range []string{"", "other", "acme", ""} {
		got := insert(ck, fmt.Sprintf(`{"n": %d}`, i+2))
		if !got.Debounced || got.ID != first.ID {
			t.Fatalf("insert %d (concurrency key %q): debounced %v, job %d; want the pending job %d", i+2, ck, got.Debounced, got.ID, first.ID)
		}
	}
	// Claimed: the key is free, and an insert without a concurrency key makes the next
	// job (at the debounce key's own placement on Citus), which a later insert with one
	// then finds.
	steps, _, err := te.Claim(ctx, "default", 10)
	if err != nil || len(steps) != 1 || steps[0].ID != first.ID || string(steps[0].Input) != `{"n": 5}` {
		t.Fatalf("claimed %+v (%v); want job %d with the latest input", steps, err, first.ID)
	}
	second := insert("", `{"n": 6}`)
	if second.Debounced || second.ID == first.ID || second.ConcurrencyKey != nil {
		t.Fatalf("insert after the claim: %+v; want a new job without a concurrency key", second)
	}
	if again := insert("acme", `{"n": 7}`); !again.Debounced || again.ID != second.ID {
		t.Fatalf("insert with acme after the claim: debounced %v, job %d; want the pending job %d", again.Debounced, again.ID, second.ID)
	}
	if n, err := te.db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE debounce_key = 'sync-acme'`); err != nil || n != 2 {
		t.Fatalf("%d jobs hold sync-acme (%v), want 2", n, err)
	}
}

// Concurrent debounced inserts of one key, each naming one of three concurrency keys or
// none, make exactly one job, which every insert answers.
func TestDebounceBesideConcurrencyKeysConcurrentInsertsMakeOneJob(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, engine.Config{})
	concurrencyKeys := []string{"", "tenant-a", "tenant-b", "tenant-c"}
	insertAtOnceMakesOneJob(t, te, 48, func(g int) engine.NewJob {
		j := engine.NewJob{Handler: "h", Debounce: debounced("hot", time.Hour, 0)}
		if ck := concurrencyKeys[g%len(concurrencyKeys)]; ck != "" {
			j.ConcurrencyKey = &ck
		}
		return j
	})
}
