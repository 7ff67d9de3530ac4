package engine

import (
	"cmp"
	"context"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
)

// latencyBucketsPerDoubling is the resolution of the charts' latency histograms.
const latencyBucketsPerDoubling = 8

// LatencyBucket is the histogram bucket of an attempt's duration: 0 below 1 µs, else
// 1 + floor(8·log2(µs)), so bucket b ≥ 1 holds [2^((b-1)/8), 2^(b/8)) µs and a
// percentile read as the bucket's geometric middle is within 2^(1/16) − 1 = 4.4 % of
// the duration it stands for. Migration 0016 computes the same numbers in SQL.
func LatencyBucket(d time.Duration) int {
	us := float64(d) / float64(time.Microsecond)
	if us < 1 {
		return 0
	}
	return int(math.Floor(math.Log2(us)*latencyBucketsPerDoubling)) + 1
}

// latencyOfBucket is the duration bucket b stands for, in milliseconds: its geometric middle.
func latencyOfBucket(b int) float64 {
	if b <= 0 {
		return 0
	}
	return math.Exp2((float64(b)-0.5)/latencyBucketsPerDoubling) / 1000
}

// latencyPercentiles reads p50, p95 and p99 from a histogram (buckets ascending, counts
// beside them): the bucket that holds the attempt of rank ⌈p·n⌉. Nil when it is empty.
func latencyPercentiles(buckets []int, counts []int64) *Latency {
	var n int64
	for _, c := range counts {
		n += c
	}
	if n == 0 || len(buckets) != len(counts) {
		return nil
	}
	at := func(p float64) float64 {
		rank := int64(math.Ceil(p * float64(n)))
		var seen int64
		for i, c := range counts {
			if seen += c; seen >= rank {
				return latencyOfBucket(buckets[i])
			}
		}
		return latencyOfBucket(buckets[len(buckets)-1])
	}
	return &Latency{P50: at(0.50), P95: at(0.95), P99: at(0.99)}
}

// Outcome classes of the charts (the history row's label).
func outcomeIsOK(label string) bool {
	switch label {
	case "next", "await", "spawn", "done":
		return true
	}
	return false
}

func outcomeIsFailure(label string) bool {
	switch label {
	case "fail", "request_too_large", "bad_secret":
		return true
	}
	return false
}

// StepRollupConfig tunes StepRollups.
type StepRollupConfig struct {
	// Interval between flushes (default 1s): how far the charts lag behind the history,
	// and what a process killed with kill -9 loses of them.
	Interval time.Duration
	// Retain is how long rollups are kept (default 25h: a chart reads 24h at most).
	Retain time.Duration
	// TrimEvery is how often the rollups past Retain are deleted (default 1 minute).
	TrimEvery time.Duration
}

// StepRollups feeds the charts (GET /v1/stats/steps): it counts the attempts this
// process writes to the step history (outcome batches, asynchronous outcomes, expired
// leases) by queue, handler and second of finishing, with a latency histogram, and
// appends what it counted with one statement a flush (migration 0016). The history has
// no index for the charts to read; a step costs a map update here instead of two B-tree
// inserts. Counting starts when the service is made (NewStepRollups) and what is left is
// flushed by Stop.
type StepRollups struct {
	engine *Engine
	cfg    StepRollupConfig
	log    *slog.Logger

	mu       sync.Mutex
	cells    map[rollupKey]*rollupCell
	lastTrim time.Time
	loop
}

type rollupKey struct {
	queue, handler string
	second         int64 // Unix seconds of finished_at
}

type rollupCell struct {
	ok, failed, done, total int
	latency                 map[int]int // bucket → attempts
}

// Validate reports the settings NewStepRollups refuses.
func (c StepRollupConfig) Validate() error {
	v := ConfigCheck{Service: "step rollups"}
	v.Check(c.Interval >= 0, "Interval", "", c.Interval, "must not be negative (0: the default, 1s)")
	v.Check(c.Retain >= 0, "Retain", "", c.Retain, "must not be negative (0: the default, 25h)")
	v.Check(c.TrimEvery >= 0, "TrimEvery", "", c.TrimEvery, "must not be negative (0: the default, 1m)")
	return v.Err()
}

// NewStepRollups returns a stopped service and makes the engine count into it (the
// engine counts into the last one made); it panics when cfg.Validate refuses a setting.
func (e *Engine) NewStepRollups(cfg StepRollupConfig) *StepRollups {
	mustBeValid(cfg.Validate())
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	if cfg.Retain == 0 {
		cfg.Retain = 25 * time.Hour
	}
	if cfg.TrimEvery == 0 {
		cfg.TrimEvery = time.Minute
	}
	r := &StepRollups{engine: e, cfg: cfg, log: e.log.With("service", "step_rollups"), cells: map[rollupKey]*rollupCell{}}
	e.rollups.Store(r)
	return r
}

// count adds one attempt. status is the job's after the attempt: a failed attempt that
// ended its job (attempts used up, or a cancel taken at the outcome) counts as failed,
// not as retried, since nothing runs again.
func (r *StepRollups) count(queue, handler, label, status string, started, finished time.Time) {
	k := rollupKey{queue: queue, handler: handler, second: finished.Unix()}
	c := r.cells[k]
	if c == nil {
		c = &rollupCell{latency: map[int]int{}}
		r.cells[k] = c
	}
	c.total++
	switch {
	case outcomeIsOK(label):
		c.ok++
		if label == "done" {
			c.done++
		}
	case outcomeIsFailure(label), status == "failed" || status == "cancelled":
		c.failed++
	}
	c.latency[LatencyBucket(finished.Sub(started))]++
}

func (r *StepRollups) countApplied(rows []pg.OutcomeApplied) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range rows {
		r.count(a.Queue, a.Handler, a.Label, a.Status, a.StartedAt, a.FinishedAt)
	}
}

func (r *StepRollups) countReaped(rows []pg.Reaped) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range rows {
		r.count(a.Queue, a.Handler, "lease_expired", a.Status, a.StartedAt, a.FinishedAt)
	}
}

// Flush appends what was counted since the last flush, with one statement; on failure
// the counts are kept for the next one.
func (r *StepRollups) Flush(ctx context.Context) error {
	r.mu.Lock()
	cells := r.cells
	r.cells = map[rollupKey]*rollupCell{}
	r.mu.Unlock()
	if len(cells) == 0 {
		return nil
	}
	rows := make([]pg.StepRollup, 0, len(cells))
	for k, c := range cells {
		row := pg.StepRollup{At: time.Unix(k.second, 0).UTC(), Queue: k.queue, Handler: k.handler,
			OK: c.ok, Failed: c.failed, Done: c.done, Total: c.total}
		for b := range c.latency {
			row.LatencyBuckets = append(row.LatencyBuckets, b)
		}
		slices.Sort(row.LatencyBuckets)
		for _, b := range row.LatencyBuckets {
			row.LatencyCounts = append(row.LatencyCounts, c.latency[b])
		}
		rows = append(rows, row)
	}
	slices.SortFunc(rows, func(a, b pg.StepRollup) int {
		return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.Handler, b.Handler))
	})
	err := r.engine.db.StepRollupAppend(ctx, rows)
	if err != nil {
		r.mu.Lock()
		for k, c := range cells {
			r.merge(k, c)
		}
		r.mu.Unlock()
	}
	return err
}

// merge adds c back under k (a flush that failed).
func (r *StepRollups) merge(k rollupKey, c *rollupCell) {
	into := r.cells[k]
	if into == nil {
		r.cells[k] = c
		return
	}
	into.ok, into.failed, into.done, into.total = into.ok+c.ok, into.failed+c.failed, into.done+c.done, into.total+c.total
	for b, n := range c.latency {
		into.latency[b] += n
	}
}

// Trim deletes the rollups older than Retain.
func (r *StepRollups) Trim(ctx context.Context) (int64, error) {
	return r.engine.db.StepRollupTrim(ctx, time.Now().Add(-r.cfg.Retain))
}

// Start flushes every Interval, and trims every TrimEvery, until Stop.
func (r *StepRollups) Start(ctx context.Context) {
	r.start(ctx, r.cfg.Interval, func(ctx context.Context) bool {
		if err := r.Flush(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("step rollup flush failed (kept for the next)", "err", err)
		}
		if time.Since(r.lastTrim) >= r.cfg.TrimEvery {
			r.lastTrim = time.Now()
			if _, err := r.Trim(ctx); err != nil && ctx.Err() == nil {
				r.log.Warn("step rollup trim failed", "err", err)
			}
		}
		return false
	})
}

// Stop ends the flushes and flushes what is left (bounded by 5 s).
func (r *StepRollups) Stop() {
	r.loop.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Flush(ctx); err != nil {
		r.log.Warn("last step rollup flush failed", "err", err)
	}
}
