package pg_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// breakerHandler registers handler name with a breaker of threshold 3, probes every 1 s
// doubling up to 4 s, pausing after 10 s open.
func breakerHandler(t *testing.T, db *pg.DB, name string) {
	t.Helper()
	threshold, probe, probeMax, pauseAfter := 3, 1000, 4000, int64(10_000)
	if _, err := db.HandlerUpsert(context.Background(), pg.HandlerUpsert{Name: name, URL: "http://example.test/",
		NewSecret: "whsec_x", BreakerThreshold: &threshold, BreakerProbeMS: &probe, BreakerProbeMaxMS: &probeMax,
		BreakerPauseAfterMS: &pauseAfter}); err != nil {
		t.Fatal(err)
	}
}

func breakerOf(t *testing.T, db *pg.DB, name string) pg.HandlerBreaker {
	t.Helper()
	h, err := db.HandlerGet(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return h.Breaker
}

// The whole state machine on a pinned clock: counting and resetting, opening at the
// threshold, one probe per interval with the interval doubling up to its cap, the pause
// after pause_after, resume, and a probe success closing it.
func TestBreakerStateMachine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	breakerHandler(t, db, "h")
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := t0.Add(d); return &t }
	record := func(tally pg.BreakerTally, now *time.Time) []pg.BreakerRecorded {
		t.Helper()
		got, err := db.HandlerBreakerRecord(ctx, []pg.BreakerTally{tally}, now)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	probe := func(now *time.Time) pg.BreakerProbe {
		t.Helper()
		p, err := db.HandlerBreakerProbe(ctx, "h", now)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	result := func(success bool, now *time.Time) (string, *time.Time) {
		t.Helper()
		state, next, err := db.HandlerBreakerProbeResult(ctx, "h", success, now)
		if err != nil {
			t.Fatal(err)
		}
		return state, next
	}

	if b := breakerOf(t, db, "h"); b.State != pg.BreakerClosed || b.ConsecutiveFailures != 0 || b.Threshold != 3 {
		t.Fatalf("new handler's breaker: %+v", b)
	}
	// A success on a handler without failures writes nothing.
	if got := record(pg.BreakerTally{Handler: "h", Reset: true}, at(0)); len(got) != 0 {
		t.Fatalf("a reset of a clean counter wrote %+v", got)
	}
	if got := record(pg.BreakerTally{Handler: "h", Failures: 2}, at(0)); len(got) != 1 || got[0].ConsecutiveFailures != 2 || got[0].Opened {
		t.Fatalf("2 failures: %+v", got)
	}
	if got := record(pg.BreakerTally{Handler: "h", Failures: 1, Reset: true}, at(0)); len(got) != 1 || got[0].ConsecutiveFailures != 1 {
		t.Fatalf("a success then a failure: %+v", got)
	}
	got := record(pg.BreakerTally{Handler: "h", Failures: 2}, at(0))
	if len(got) != 1 || !got[0].Opened || got[0].State != pg.BreakerOpen || got[0].ConsecutiveFailures != 3 {
		t.Fatalf("the threshold reached: %+v", got)
	}
	if got := record(pg.BreakerTally{Handler: "h", Failures: 1}, at(0)); got[0].Opened || got[0].State != pg.BreakerOpen {
		t.Fatalf("a failure of an open breaker opened it again: %+v", got)
	}
	if b := breakerOf(t, db, "h"); !b.OpenedAt.Equal(t0) || !b.NextProbeAt.Equal(t0.Add(time.Second)) || b.Opens != 1 {
		t.Fatalf("open breaker: %+v", b)
	}

	if p := probe(at(999 * time.Millisecond)); p.Probe || p.State != pg.BreakerOpen {
		t.Fatalf("a probe before it is due: %+v", p)
	}
	// Each failed probe doubles the interval: 1 s, 2 s, 4 s, then the 4 s cap.
	now := time.Second
	for _, next := range []time.Duration{2 * time.Second, 4 * time.Second, 4 * time.Second} {
		if p := probe(at(now)); !p.Probe || p.State != pg.BreakerHalfOpen {
			t.Fatalf("the due probe at +%s: %+v", now, p)
		}
		if p := probe(at(now)); p.Probe {
			t.Fatalf("a second probe at +%s: %+v", now, p)
		}
		state, nextAt := result(false, at(now))
		if state != pg.BreakerOpen || !nextAt.Equal(t0.Add(now+next)) {
			t.Fatalf("failed probe at +%s: %s, next %s, want +%s", now, state, nextAt, now+next)
		}
		now += next
	}
	// now = +11 s: open for longer than the 10 s pause_after; the due probe pauses it.
	if p := probe(at(now)); p.Probe || p.PausedAt == nil || !p.PausedAt.Equal(t0.Add(now)) {
		t.Fatalf("the probe after pause_after: %+v", p)
	}
	if p := probe(at(now + time.Hour)); p.Probe || p.PausedAt == nil {
		t.Fatalf("a paused handler was probed: %+v", p)
	}
	if b := breakerOf(t, db, "h"); b.PausedReason == nil || b.PausedAt == nil {
		t.Fatalf("paused breaker: %+v", b)
	}
	h, err := db.HandlerBreakerResume(ctx, "h")
	if err != nil || h.Breaker.State != pg.BreakerClosed || h.Breaker.PausedAt != nil || h.Breaker.ConsecutiveFailures != 0 {
		t.Fatalf("resume: %+v %v", h.Breaker, err)
	}

	// Open again (never pausing now); a probe whose process died (no result) is given up
	// after the handler's timeout (30 s) plus 30 s, and another caller may probe; its
	// success closes.
	never := int64(0)
	if _, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://example.test/", BreakerPauseAfterMS: &never}); err != nil {
		t.Fatal(err)
	}
	record(pg.BreakerTally{Handler: "h", Failures: 3}, at(time.Hour))
	if p := probe(at(time.Hour + time.Second)); !p.Probe {
		t.Fatalf("probe after reopening: %+v", p)
	}
	if p := probe(at(time.Hour + time.Second + 59*time.Second)); p.Probe {
		t.Fatalf("a second probe while the first may still run: %+v", p)
	}
	if p := probe(at(time.Hour + time.Second + 60*time.Second)); !p.Probe {
		t.Fatalf("no probe after the lost one's deadline: %+v", p)
	}
	if state, next := result(true, at(time.Hour+62*time.Second)); state != pg.BreakerClosed || next != nil {
		t.Fatalf("successful probe: %s %v", state, next)
	}
	if _, _, err := db.HandlerBreakerProbeResult(ctx, "h", true, nil); !errors.Is(err, pg.ErrNotFound) {
		t.Fatalf("a probe result for a closed breaker: %v", err)
	}
	if _, err := db.HandlerBreakerProbe(ctx, "nope", nil); !errors.Is(err, pg.ErrNotFound) {
		t.Fatalf("probe of an unknown handler: %v", err)
	}

	// Threshold 0 turns the breaker off and closes an open one.
	record(pg.BreakerTally{Handler: "h", Failures: 3}, nil)
	off := 0
	if h, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://example.test/", BreakerThreshold: &off}); err != nil ||
		h.Breaker.State != pg.BreakerClosed || h.Breaker.ConsecutiveFailures != 0 {
		t.Fatalf("threshold 0: %+v %v", h.Breaker, err)
	}
	if got := record(pg.BreakerTally{Handler: "h", Failures: 50}, nil); got[0].Opened || got[0].State != pg.BreakerClosed {
		t.Fatalf("a breaker turned off opened: %+v", got)
	}
}

// Twenty callers ask for the probe at once, on their own connections: exactly one wins.
// Twenty concurrent batches of one failure each add up to twenty.
func TestBreakerOneProbeAndCountsAddUpUnderConcurrency(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	breakerHandler(t, db, "h")
	const callers = 20
	var wg sync.WaitGroup
	var mu sync.Mutex
	opened := 0
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := db.HandlerBreakerRecord(ctx, []pg.BreakerTally{{Handler: "h", Failures: 1}}, nil)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if got[0].Opened {
				opened++
			}
		}()
	}
	wg.Wait()
	if b := breakerOf(t, db, "h"); b.ConsecutiveFailures != callers || b.State != pg.BreakerOpen || b.Opens != 1 || opened != 1 {
		t.Fatalf("after %d concurrent failures: %+v, opened by %d statements", callers, b, opened)
	}
	due := time.Now().Add(2 * time.Second) // past the first probe time, before the pause
	won := 0
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := db.HandlerBreakerProbe(ctx, "h", &due)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if p.Probe {
				won++
			}
		}()
	}
	wg.Wait()
	if won != 1 {
		t.Fatalf("%d of %d concurrent callers won the probe, want 1", won, callers)
	}
}

// A parked step is runnable again at its own time, its attempt undone, and the claim
// shows each step's handler breaker.
func TestLeaseParkManyGivesStepsBackUnrun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	breakerHandler(t, db, "h")
	// Inserted while the breaker is closed (an open one parks what is inserted).
	if _, err := db.JobInsertMany(ctx, []pg.JobInsert{{Queue: "q", Handler: "h"}, {Queue: "q", Handler: "h"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.HandlerBreakerRecord(ctx, []pg.BreakerTally{{Handler: "h", Failures: 3}}, nil); err != nil {
		t.Fatal(err)
	}
	claimed, err := db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: "q", Limit: 10, LeaseTTL: time.Minute, Owner: "t", SignalCap: 100})
	if err != nil || len(claimed) != 2 {
		t.Fatalf("claim: %d %v", len(claimed), err)
	}
	c := claimed[0]
	if c.BreakerState == nil || *c.BreakerState != pg.BreakerOpen || *c.ConsecutiveFailures != 3 || c.BreakerNextProbeAt == nil {
		t.Fatalf("the claim's breaker view: %v %v %v", c.BreakerState, c.ConsecutiveFailures, c.BreakerNextProbeAt)
	}
	later := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	ids, err := db.LeaseParkMany(ctx, []pg.Park{{ID: c.ID, Token: c.LeaseToken, At: later},
		{ID: claimed[1].ID, Token: "00000000-0000-0000-0000-000000000000", At: later}})
	if err != nil || len(ids) != 1 || ids[0] != c.ID {
		t.Fatalf("park: %v %v (the stale token must not park)", ids, err)
	}
	j, err := db.JobGet(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.Status != "runnable" || j.Attempt != 0 || j.EligibleAt == nil || !j.EligibleAt.Equal(later) {
		t.Fatalf("parked job: status %s attempt %d eligible %v, want runnable 0 %s", j.Status, j.Attempt, j.EligibleAt, later)
	}
	again, err := db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: "q", Limit: 10, LeaseTTL: time.Minute, Owner: "t", SignalCap: 100})
	if err != nil || len(again) != 0 {
		t.Fatalf("a parked step was claimed before its time: %d %v", len(again), err)
	}
}

// A job inserted for a handler whose breaker is open is inserted parked, as a claim would
// park it: the batch's first item due at the next probe, the others in 150-300 s, all
// marked 'breaker:<handler>' (the answer says so, as the stored row does), and every one
// of them woken when the breaker closes. A closed handler's jobs in the same batch are
// inserted runnable now, and a claim finds only them.
func TestInsertParksTheJobsOfAnOpenBreaker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	breakerHandler(t, db, "dead")
	breakerHandler(t, db, "alive")
	if _, err := db.HandlerBreakerRecord(ctx, []pg.BreakerTally{{Handler: "dead", Failures: 3}}, nil); err != nil {
		t.Fatal(err)
	}
	b := breakerOf(t, db, "dead")
	if b.State != pg.BreakerOpen || b.NextProbeAt == nil {
		t.Fatalf("breaker: %+v", b)
	}
	got, err := db.JobInsertMany(ctx, []pg.JobInsert{{Queue: "q", Handler: "dead"}, {Queue: "q", Handler: "dead"},
		{Queue: "q", Handler: "alive"}, {Queue: "q", Handler: "dead"}})
	if err != nil {
		t.Fatal(err)
	}
	now, err := db.DatabaseNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range got {
		stored, err := db.JobGet(ctx, g.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !g.EligibleAt.Equal(*stored.EligibleAt) || (g.LeaseOwner == nil) != (stored.LeaseOwner == nil) {
			t.Fatalf("item %d: answered eligible %s owner %v, stored %s %v", i, g.EligibleAt, g.LeaseOwner, stored.EligibleAt, stored.LeaseOwner)
		}
		switch {
		case i == 2:
			if g.LeaseOwner != nil || g.EligibleAt.After(now) {
				t.Fatalf("the alive handler's job: owner %v eligible %s (now %s)", g.LeaseOwner, g.EligibleAt, now)
			}
		case g.LeaseOwner == nil || *g.LeaseOwner != "breaker:dead":
			t.Fatalf("item %d of the dead handler is not parked: owner %v", i, g.LeaseOwner)
		case i == 0:
			if !g.EligibleAt.Equal(*b.NextProbeAt) {
				t.Fatalf("the batch's first dead item is due at %s, want the next probe %s", g.EligibleAt, b.NextProbeAt)
			}
		default:
			if wait := g.EligibleAt.Sub(now); wait < 149*time.Second || wait > 301*time.Second {
				t.Fatalf("item %d is parked for %s, want 150-300 s", i, wait)
			}
		}
	}
	claimed, err := db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: "q", Limit: 10, LeaseTTL: time.Minute, Owner: "t", SignalCap: 100})
	if err != nil || len(claimed) != 1 || claimed[0].Handler != "alive" {
		t.Fatalf("claimed %d (%v), want the alive handler's job alone", len(claimed), err)
	}
	if n, err := db.JobWakeParked(ctx, "dead"); err != nil || n != 3 {
		t.Fatalf("the breaker's close woke %d (%v), want the 3 parked at insert", n, err)
	}
}
