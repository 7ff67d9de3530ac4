package engine_test

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// A latency read back from its histogram bucket is within 4.5 % of the duration, from a
// microsecond to a week.
func TestLatencyBucketIsWithinItsError(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		d := time.Duration(math.Exp2(r.Float64()*40)) * time.Microsecond // 1 µs .. 12 days
		got := engine.LatencyOfBucket(engine.LatencyBucket(d))
		want := float64(d) / float64(time.Millisecond)
		if math.Abs(got-want)/want > 0.045 {
			t.Fatalf("%s: bucket %d stands for %.6f ms", d, engine.LatencyBucket(d), got)
		}
	}
	if b := engine.LatencyBucket(0); b != 0 {
		t.Fatalf("0 is in bucket %d", b)
	}
	if a, b := engine.LatencyBucket(time.Millisecond), engine.LatencyBucket(time.Millisecond+50*time.Microsecond); a >= b {
		t.Fatalf("1 ms and 1.05 ms share bucket %d", a)
	}
}

// historyClasses counts the history rows of a queue by the charts' outcome classes, as
// the history itself says: failed is an answer that asked for no retry, or the attempt a
// failed or cancelled job ended on (the job keeps its step and attempt). (Two plain reads put together here: on
// Citus a join of steps and jobs off their distribution column is refused.)
func historyClasses(t *testing.T, db *pg.DB, queue string) (ok, failed, done, total int64) {
	t.Helper()
	ctx := context.Background()
	rows, err := db.QueryStrings(ctx, `SELECT job_id::text, step::text, attempt::text, outcome FROM steps WHERE queue = $1`, queue)
	if err != nil {
		t.Fatal(err)
	}
	// An ended job keeps the step and attempt it ended on: that attempt ended it.
	ended, err := db.QueryStrings(ctx, `SELECT id::text, step::text, attempt::text FROM jobs WHERE queue = $1 AND status IN ('failed', 'cancelled')`, queue)
	if err != nil {
		t.Fatal(err)
	}
	endedOn := map[[3]string]bool{}
	for _, r := range ended {
		endedOn[[3]string(r)] = true
	}
	for _, r := range rows {
		total++
		switch r[3] {
		case "next", "await", "spawn", "done":
			ok++
			if r[3] == "done" {
				done++
			}
		case "fail", "request_too_large", "bad_secret":
			failed++
		default:
			if endedOn[[3]string{r[0], r[1], r[2]}] {
				failed++
			}
		}
	}
	return ok, failed, done, total
}

func seriesSums(s engine.StepSeries) (ok, failed, done, total int64) {
	for _, p := range s.Points {
		ok, failed, done, total = ok+p.OK, failed+p.Failed, done+p.Done, total+p.Total
		if p.OK+p.Retry+p.Failed != p.Total || (p.Total == 0) != (p.Latency == nil) {
			panic("a point's classes do not add up, or its latency does not match its count")
		}
	}
	return
}

// The charts count what the history holds: two engines on one database (two server
// processes), each counting the outcomes it applied (done, next, retried, failed, in
// batches, and an expired lease its reaper took back), give the history's figures by
// class once both flushed, for the queue and for the handler; what a flush could not
// write is kept for the next one.
func TestChartsCountWhatTheHistoryHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{LeaseTTL: time.Hour})
	second, err := engine.New(pgtest.Open(t, te.url, pg.Options{}), engine.Config{LeaseTTL: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, other := te.NewStepRollups(engine.StepRollupConfig{}), second.NewStepRollups(engine.StepRollupConfig{})
	for range 60 {
		te.insert(t, engine.NewJob{Input: json.RawMessage(`{}`)})
	}
	outcomes := []engine.Outcome{
		{Kind: pg.KindDone, Label: "done"},
		{Kind: pg.KindNext, Label: "next"},
		{Kind: pg.KindRetry, Label: "error", Error: json.RawMessage(`{"message":"boom"}`)},
		{Kind: pg.KindFail, Label: "fail", Error: json.RawMessage(`{"message":"no"}`)},
	}
	for round, eng := range []*engine.Engine{te.Engine, second, te.Engine} {
		steps, _, err := eng.Claim(ctx, "default", 25)
		if err != nil || len(steps) == 0 {
			t.Fatalf("round %d: claimed %d (%v)", round, len(steps), err)
		}
		batch := make([]engine.StepOutcome, len(steps)-1) // the last one's lease expires
		for i, st := range steps[:len(steps)-1] {
			batch[i] = st.WithOutcome(outcomes[i%len(outcomes)])
		}
		for _, r := range eng.ApplyOutcomes(ctx, batch) {
			if r.Err != nil || !r.Applied {
				t.Fatalf("round %d: result %+v", round, r)
			}
		}
		ahead := eng.NewReaper(engine.ReaperConfig{Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
		if st, err := ahead.Sweep(ctx); err != nil || st.Reaped != 1 {
			t.Fatalf("round %d: reaped %+v (%v)", round, st, err)
		}
	}
	// A flush that cannot write keeps its counts.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := first.Flush(cancelled); err == nil {
		t.Fatal("a flush with a cancelled context reported no error")
	}
	for _, r := range []*engine.StepRollups{first, other} {
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ok, failed, done, total := historyClasses(t, te.db, "default")
	if total != 3*25 || done == 0 || failed == 0 || ok == done || total == ok+failed {
		t.Fatalf("the history: ok %d failed %d done %d of %d: not every class is there", ok, failed, done, total)
	}
	queue, handler := "default", "h"
	for _, q := range []engine.StepStatsQuery{{Queue: &queue}, {Handler: &handler}, {Queue: &queue, Bucket: time.Second, Window: 5 * time.Minute}} {
		s, err := te.StepStats(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		gotOK, gotFailed, gotDone, gotTotal := seriesSums(s)
		if gotOK != ok || gotFailed != failed || gotDone != done || gotTotal != total {
			t.Fatalf("%+v: ok %d failed %d done %d of %d; the history says %d %d %d of %d",
				q, gotOK, gotFailed, gotDone, gotTotal, ok, failed, done, total)
		}
	}
	// Nothing is counted twice: a flush with nothing new writes nothing.
	if err := first.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := te.db.QueryInt(ctx, `SELECT coalesce(sum(total), 0) FROM step_rollups`); err != nil || n != total {
		t.Fatalf("the rollups hold %d attempts (%v), want %d", n, err, total)
	}
}

// A job's last attempt, after which it failed, counts as failed, not as retried: a
// handler whose every job fails with attempts used up shows "failed", none "retried".
// The attempts before it, and an expired lease that runs again, count as retried; the
// lease that expired on a job's last attempt counts as failed.
func TestChartsCountALastAttemptAsFailed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{LeaseTTL: time.Hour})
	r := te.NewStepRollups(engine.StepRollupConfig{})
	two := 2
	for range 3 {
		te.insert(t, engine.NewJob{Queue: "last", Input: json.RawMessage(`{}`), MaxAttempts: &two})
	}
	status := 500
	// Two rounds of the three jobs: the first attempts are retried, the second ones end the jobs.
	for round := 1; round <= 2; round++ {
		var steps []engine.Step
		deadline := time.Now().Add(10 * time.Second)
		for len(steps) < 3 && time.Now().Before(deadline) { // the retries' backoff (10 ms) passes
			got, _, err := te.Claim(ctx, "last", 3)
			if err != nil {
				t.Fatal(err)
			}
			steps = append(steps, got...)
		}
		if len(steps) != 3 {
			t.Fatalf("round %d: claimed %d of 3", round, len(steps))
		}
		var batch []engine.StepOutcome
		for i, st := range steps {
			if round == 2 && i == 2 { // its lease expires on the last attempt instead
				continue
			}
			batch = append(batch, st.WithOutcome(engine.ErrorOutcome("http_error", "HTTP 500", &status, nil, nil)))
		}
		for _, res := range te.ApplyOutcomes(ctx, batch) {
			if res.Err != nil || !res.Applied {
				t.Fatalf("round %d: %+v", round, res)
			}
		}
	}
	ahead := te.NewReaper(engine.ReaperConfig{Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
	if st, err := ahead.Sweep(ctx); err != nil || st.Reaped != 1 {
		t.Fatalf("reaped %+v (%v)", st, err)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	queue := "last"
	s, err := te.StepStats(ctx, engine.StepStatsQuery{Queue: &queue})
	if err != nil {
		t.Fatal(err)
	}
	var retry, failed, total int64
	for _, p := range s.Points {
		retry, failed, total = retry+p.Retry, failed+p.Failed, total+p.Total
	}
	if total != 6 || retry != 3 || failed != 3 {
		t.Fatalf("the chart counts %d attempts: %d retried, %d failed; want 6: 3 retried (the first attempts), 3 failed (the last)",
			total, retry, failed)
	}
	if _, hf, _, ht := historyClasses(t, te.db, "last"); hf != failed || ht != total {
		t.Fatalf("the history says %d failed of %d, the chart %d of %d", hf, ht, failed, total)
	}
}

// A chart's percentiles are the history's, to the histogram's resolution: attempts of 2,
// 20 and 200 ms (70, 25 and 5 of 100) give p50 ≈ 2, p95 ≈ 20 and p99 ≈ 200 ms; rollups
// older than the retention are trimmed.
func TestChartLatencyIsTheHistorysWithinTheBucketError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	r := te.NewStepRollups(engine.StepRollupConfig{Retain: time.Hour})
	now, err := te.db.DatabaseNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var rows []pg.StepRollup
	add := func(at time.Time, d time.Duration, n int) {
		rows = append(rows, pg.StepRollup{At: at.Truncate(time.Second), Queue: "lat", Handler: "h", OK: n, Total: n,
			LatencyBuckets: []int{engine.LatencyBucket(d)}, LatencyCounts: []int{n}})
	}
	minute := now.Truncate(time.Minute) // the start of the last bucket of the series below
	add(minute, 2*time.Millisecond, 70)
	add(minute, 20*time.Millisecond, 25)
	add(minute, 200*time.Millisecond, 5)
	add(now.Add(-3*time.Hour), time.Second, 1000) // past the retention
	if err := te.db.StepRollupAppend(ctx, rows); err != nil {
		t.Fatal(err)
	}
	queue := "lat"
	s, err := te.StepStats(ctx, engine.StepStatsQuery{Queue: &queue, Window: time.Minute, Bucket: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	p := s.Points[len(s.Points)-1]
	if len(s.Points) != 1 || p.Total != 100 || !p.At.Equal(minute) {
		t.Fatalf("%d points; the last at %s holds %d attempts, want one at %s with 100", len(s.Points), p.At, p.Total, minute)
	}
	within := func(got, want float64) bool { return math.Abs(got-want)/want <= 0.045 }
	if p.Latency == nil || !within(p.Latency.P50, 2) || !within(p.Latency.P95, 20) || !within(p.Latency.P99, 200) {
		t.Fatalf("percentiles %+v, want about 2, 20 and 200 ms", p.Latency)
	}
	if n, err := r.Trim(ctx); err != nil || n != 1 {
		t.Fatalf("trimmed %d rollups (%v), want the one past an hour", n, err)
	}
}
