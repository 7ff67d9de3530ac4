package engine_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// The curve: base·2^(attempt-1), capped, then the jitter draw u places the delay in
// [½, 1] of that.
func TestRetryDelayCurve(t *testing.T) {
	t.Parallel()
	const s, ms, h = time.Second, time.Millisecond, time.Hour
	cases := []struct {
		name                string
		attempt             int
		base, ceiling, want time.Duration
		u                   float64
	}{
		{"first attempt, lowest draw", 1, s, h, 500 * ms, 0},
		{"first attempt, highest draw", 1, s, h, s, 1},
		{"second attempt doubles", 2, s, h, 2 * s, 1},
		{"second attempt, middle draw", 2, s, h, 1500 * ms, 0.5},
		{"third attempt doubles again", 3, s, h, 4 * s, 1},
		{"milliseconds double alike", 4, 10 * ms, h, 80 * ms, 1},
		{"attempt 0 counts as the first", 0, s, h, s, 1},
		{"a negative attempt counts as the first", -3, s, h, 500 * ms, 0},
		{"capped at the maximum", 20, s, h, h, 1},
		{"the cap is drawn from too", 20, s, h, 30 * time.Minute, 0},
		{"past 40 doublings the cap holds", 1000, ms, 24 * h, 24 * h, 1},
		{"a maximum below the base caps the first attempt", 1, 10 * s, s, s, 1},
		{"base 0 retries at once", 7, 0, h, 0, 1},
		{"maximum 0 retries at once", 7, s, 0, 0, 1},
	}
	for _, c := range cases {
		if got := engine.RetryDelayAt(c.attempt, c.base, c.ceiling, c.u); got != c.want {
			t.Errorf("%s: RetryDelay(%d, %s, %s) with draw %.1f = %s, want %s", c.name, c.attempt, c.base, c.ceiling, c.u, got, c.want)
		}
	}
}

// RetryDelay draws its jitter: every delay lies in [½, 1] of the capped curve, and a
// burst of retries does not all wait the same.
func TestRetryDelayIsJittered(t *testing.T) {
	t.Parallel()
	seen := map[time.Duration]bool{}
	for range 1000 {
		d := engine.RetryDelay(3, time.Second, time.Hour)
		if d < 2*time.Second || d > 4*time.Second {
			t.Fatalf("RetryDelay(3, 1s, 1h) = %s, outside [2s, 4s]", d)
		}
		seen[d] = true
	}
	if len(seen) < 100 {
		t.Fatalf("1000 draws gave %d distinct delays: no jitter", len(seen))
	}
}

// delayOf is how long after its last write a job becomes eligible: the delay the
// statement that wrote it was given (both columns take the same now()).
func delayOf(t *testing.T, te testEngine, id int64) time.Duration {
	t.Helper()
	j := te.job(t, id)
	if j.EligibleAt == nil {
		t.Fatalf("job %d has no eligible_at (status %s)", id, j.Status)
	}
	return j.EligibleAt.Sub(j.UpdatedAt)
}

// makeDue lets a job that waits out a backoff run now, so a test claims its next attempt
// without waiting.
func makeDue(t *testing.T, te testEngine, id int64) {
	t.Helper()
	if _, err := te.db.Exec(context.Background(), `UPDATE jobs SET eligible_at = now() WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
}

// registerSlowHandler registers a handler of 5 attempts and a backoff from a minute up
// to 150 s, so the curve's steps are far apart from a test's own duration.
func registerSlowHandler(t *testing.T, te testEngine, name string) {
	t.Helper()
	attempts, base, ceiling := 5, 60_000, 150_000
	if _, err := te.db.HandlerUpsert(context.Background(), pg.HandlerUpsert{Name: name, URL: "http://127.0.0.1:9/",
		MaxAttempts: &attempts, BackoffBaseMS: &base, BackoffMaxMS: &ceiling}); err != nil {
		t.Fatal(err)
	}
}

var retryAnswer = engine.Outcome{Kind: pg.KindRetry, Label: "retry", Error: json.RawMessage(`{"message":"later"}`)}

func fromDispatcher(st engine.Step, o engine.Outcome) engine.StepOutcome { return st.WithOutcome(o) }

func fromAPI(st engine.Step, o engine.Outcome) engine.StepOutcome {
	return engine.StepOutcome{JobID: st.ID, Token: st.LeaseToken, Outcome: o}
}

// A retry without a delay waits as the handler's backoff says for the attempt that
// failed, whether the outcome comes from the dispatcher (which has the settings from the
// claim: no statement more) or from the asynchronous-step API (one statement reads
// them); a retry with its own delay waits exactly that, and reads nothing.
func TestRetryWaitsTheHandlersBackoff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	registerSlowHandler(t, te, "slow")
	id := te.insert(t, engine.NewJob{Handler: "slow"})
	five := 5 * time.Second
	cases := []struct {
		name     string
		outcome  func(engine.Step, engine.Outcome) engine.StepOutcome
		delay    *time.Duration
		min, max time.Duration
		reads    int // LeaseGetBackoffs statements
	}{
		{"attempt 1 from the dispatcher", fromDispatcher, nil, 30 * time.Second, 60 * time.Second, 0},
		{"attempt 2 from the API", fromAPI, nil, 60 * time.Second, 120 * time.Second, 1},
		{"attempt 3 from the dispatcher, capped", fromDispatcher, nil, 75 * time.Second, 150 * time.Second, 0},
		{"attempt 4 from the API, capped", fromAPI, nil, 75 * time.Second, 150 * time.Second, 1},
		{"attempt 5 with its own delay", fromAPI, &five, five, five, 0},
	}
	for i, c := range cases { // in order: each runs the next attempt of the same job
		te.counter.Reset()
		st := te.claim(t)
		if st.Attempt != i+1 {
			t.Fatalf("%s: claimed attempt %d", c.name, st.Attempt)
		}
		o := retryAnswer
		o.Delay = c.delay
		applied, err := te.ApplyOutcome(ctx, c.outcome(st, o))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		wantStatus := "runnable"
		if st.Attempt == 5 {
			wantStatus = "failed" // the last attempt: no retry, whatever the delay
		}
		if applied.Status != wantStatus {
			t.Fatalf("%s: status %s, want %s", c.name, applied.Status, wantStatus)
		}
		if wantStatus == "runnable" {
			if got := delayOf(t, te, id); got < c.min || got > c.max {
				t.Errorf("%s: waits %s, want within [%s, %s]", c.name, got, c.min, c.max)
			}
		}
		if n := te.counter.Count("LeaseGetBackoffs"); n != c.reads {
			t.Errorf("%s: %d backoff reads, want %d", c.name, n, c.reads)
		}
		makeDue(t, te, id)
	}
}

// A step whose handler is no longer registered retries after a flat second from either
// path, and a retry posted with a stale token is refused after reading nothing it could
// use.
func TestRetryOfAnUnregisteredHandlerWaitsASecond(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	registerSlowHandler(t, te, "slow")
	id := te.insert(t, engine.NewJob{Handler: "slow"})
	if err := te.DeleteHandler(ctx, "slow"); err != nil {
		t.Fatal(err)
	}
	for _, path := range []struct {
		name    string
		outcome func(engine.Step, engine.Outcome) engine.StepOutcome
	}{{"dispatcher", fromDispatcher}, {"API", fromAPI}} {
		st := te.claim(t)
		if st.HandlerURL != nil {
			t.Fatalf("the claim found the deleted handler")
		}
		if _, err := te.ApplyOutcome(ctx, path.outcome(st, retryAnswer)); err != nil {
			t.Fatalf("%s: %v", path.name, err)
		}
		if got := delayOf(t, te, id); got != time.Second {
			t.Errorf("%s: waits %s, want 1s", path.name, got)
		}
		makeDue(t, te, id)
	}
	st := te.claim(t)
	stale := engine.StepOutcome{JobID: st.ID, Token: "00000000-0000-0000-0000-000000000000", Outcome: retryAnswer}
	if _, err := te.ApplyOutcome(ctx, stale); err != engine.ErrLeaseLost {
		t.Fatalf("a retry with a stale token: %v, want ErrLeaseLost", err)
	}
}

// The reaper draws each expired lease's delay from its handler's backoff (a flat second
// for a job whose handler is gone), judging expiry by its own clock; a sweep that finds
// nothing expired costs one statement.
func TestReaperBacksOffByTheHandler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{LeaseTTL: time.Hour})
	registerSlowHandler(t, te, "slow")
	registerSlowHandler(t, te, "gone")
	slow := te.insert(t, engine.NewJob{Handler: "slow"})
	gone := te.insert(t, engine.NewJob{Handler: "gone"})
	if steps, _, err := te.Claim(ctx, "default", 10); err != nil || len(steps) != 2 {
		t.Fatalf("claim: %d steps, %v", len(steps), err)
	}
	if err := te.DeleteHandler(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	reaper := te.NewReaper(engine.ReaperConfig{Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
	te.counter.Reset()
	st, err := reaper.Sweep(ctx)
	if err != nil || st.Reaped != 2 {
		t.Fatalf("sweep: %+v, %v", st, err)
	}
	want := 2
	if pgtest.Citus() {
		// The reaper runs per shard: a list on each of the 32 shards, a reap on each
		// shard with expired leases (at most the two jobs' shards).
		want = 32 + 2
	}
	if n := te.counter.Count("JobListExpiredLeases") + te.counter.Count("JobReapExpiredLeases"); n > want {
		t.Errorf("the sweep ran %d lease statements, want at most %d", n, want)
	}
	for _, c := range []struct {
		name     string
		id       int64
		min, max time.Duration
	}{{"handler slow, attempt 1", slow, 30 * time.Second, 60 * time.Second}, {"handler gone", gone, time.Second, time.Second}} {
		if j := te.job(t, c.id); j.Status != "runnable" || j.Attempt != 1 {
			t.Fatalf("%s: %s at attempt %d", c.name, j.Status, j.Attempt)
		}
		if got := delayOf(t, te, c.id); got < c.min || got > c.max {
			t.Errorf("%s: waits %s, want within [%s, %s]", c.name, got, c.min, c.max)
		}
	}
	te.counter.Reset()
	if st, err := reaper.Sweep(ctx); err != nil || st.Reaped != 0 {
		t.Fatalf("second sweep: %+v, %v", st, err)
	}
	if n := te.counter.Count("JobReapExpiredLeases"); n != 0 {
		t.Errorf("a sweep with nothing expired ran JobReapExpiredLeases %d times", n)
	}
}
