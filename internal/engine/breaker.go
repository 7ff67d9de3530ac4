package engine

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gendurable/gendurable/internal/pg"
)

// Breaker states, and the values the dispatcher trades with the breaker statements.
const (
	BreakerClosed   = pg.BreakerClosed
	BreakerOpen     = pg.BreakerOpen
	BreakerHalfOpen = pg.BreakerHalfOpen
)

type (
	// BreakerTally is what one outcome batch says about a handler's breaker.
	BreakerTally = pg.BreakerTally
	// BreakerRecorded is a handler's breaker after a tally was recorded.
	BreakerRecorded = pg.BreakerRecorded
	// BreakerProbe is the breaker as a probe request found it, and whether it won the probe.
	BreakerProbe = pg.BreakerProbe
	// Park is a claimed step given back unrun until a time.
	Park = pg.Park
)

// Breaker is a handler's circuit breaker (docs/flow-control.md, "Circuit breaker"): its
// settings and the state every server process shares through the handler's row.
type Breaker struct {
	// Threshold is the consecutive failures (connection errors, timeouts, 5xx) that
	// open it; 0 turns it off.
	Threshold int
	// ProbeInterval is the wait before the first probe of an open breaker; each failed
	// probe doubles it, up to ProbeIntervalMax.
	ProbeInterval, ProbeIntervalMax time.Duration
	// PauseAfter pauses a handler whose breaker stayed open for longer (0: never).
	PauseAfter time.Duration

	State               string // closed, open or half_open
	ConsecutiveFailures int
	OpenedAt            *time.Time
	NextProbeAt         *time.Time
	Opens               int64
	// PausedAt is set while the breaker holds the handler paused; PausedReason says why.
	PausedAt     *time.Time
	PausedReason *string
}

func breakerOf(b pg.HandlerBreaker) Breaker {
	ms := func(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
	return Breaker{Threshold: b.Threshold, ProbeInterval: ms(int64(b.ProbeMS)), ProbeIntervalMax: ms(int64(b.ProbeMaxMS)),
		PauseAfter: ms(b.PauseAfterMS), State: b.State, ConsecutiveFailures: b.ConsecutiveFailures, OpenedAt: b.OpenedAt,
		NextProbeAt: b.NextProbeAt, Opens: b.Opens, PausedAt: b.PausedAt, PausedReason: b.PausedReason}
}

// BreakerSettings changes a handler's breaker; nil fields keep the current value (or take
// the default: threshold 10, probe interval 5s up to 5m, pause after 1h).
type BreakerSettings struct {
	Threshold        *int           // 0-1000000; 0 turns the breaker off (and closes it)
	ProbeInterval    *time.Duration // 1ms-24h
	ProbeIntervalMax *time.Duration // 1ms-24h
	PauseAfter       *time.Duration // 0-720h; 0 never pauses
}

// maxPauseAfter bounds how long a breaker may stay open before it pauses its handler.
const maxPauseAfter = 30 * 24 * time.Hour

func (v *validator) breaker(b BreakerSettings) {
	if b.Threshold != nil && (*b.Threshold < 0 || *b.Threshold > 1_000_000) {
		v.add("breaker/threshold", "must be between 0 (off) and 1000000, got %d", *b.Threshold)
	}
	for _, d := range []struct {
		field string
		value *time.Duration
	}{{"breaker/probe_interval", b.ProbeInterval}, {"breaker/probe_interval_max", b.ProbeIntervalMax}} {
		if d.value != nil && (*d.value < time.Millisecond || *d.value > maxHandlerDuration) {
			v.add(d.field, "must be a duration between 1ms and 24h")
		}
	}
	if b.PauseAfter != nil && (*b.PauseAfter < 0 || *b.PauseAfter > maxPauseAfter) {
		v.add("breaker/pause_after", "must be a duration between 0 (never) and 720h")
	}
}

func (b BreakerSettings) apply(p *pg.HandlerUpsert) {
	p.BreakerThreshold = b.Threshold
	msInt := func(d *time.Duration) *int {
		if d == nil {
			return nil
		}
		n := int(d.Milliseconds())
		return &n
	}
	p.BreakerProbeMS, p.BreakerProbeMaxMS = msInt(b.ProbeInterval), msInt(b.ProbeIntervalMax)
	if b.PauseAfter != nil {
		n := b.PauseAfter.Milliseconds()
		p.BreakerPauseAfterMS = &n
	}
}

// RecordBreakerFailures adds the breaker tallies of one outcome batch to their handlers
// (one statement; a handler with nothing to change is not written) and answers the
// handlers written. now nil is the database's clock.
func (e *Engine) RecordBreakerFailures(ctx context.Context, tallies []BreakerTally, now *time.Time) ([]BreakerRecorded, error) {
	return e.db.HandlerBreakerRecord(ctx, tallies, now)
}

// AskBreakerProbe asks for the single probe of handler's open breaker: at most one caller
// across every process wins it per interval. It pauses a handler open for longer than
// its PauseAfter instead. One statement.
func (e *Engine) AskBreakerProbe(ctx context.Context, handler string, now *time.Time) (BreakerProbe, error) {
	return e.db.HandlerBreakerProbe(ctx, handler, now)
}

// RecordBreakerProbe records the outcome of the probe this process won: success closes
// the breaker, failure reopens it with a longer interval. ErrNotFound when the breaker
// was no longer half-open (resumed meanwhile).
func (e *Engine) RecordBreakerProbe(ctx context.Context, handler string, success bool, now *time.Time) (string, *time.Time, error) {
	return e.db.HandlerBreakerProbeResult(ctx, handler, success, now)
}

// ParkSteps gives claimed steps back without calling their webhook (their handler's
// breaker is open), each runnable again at its own time, its attempt undone. One
// statement; answers the ids given back.
func (e *Engine) ParkSteps(ctx context.Context, parks []Park) ([]int64, error) {
	return e.db.LeaseParkMany(ctx, parks)
}

// WakeParked makes the steps an open breaker parked for handler due now (the breaker
// closed) and answers how many. One statement, reading the parked steps only.
func (e *Engine) WakeParked(ctx context.Context, handler string) (int64, error) {
	return e.db.JobWakeParked(ctx, handler)
}

// ResumeHandler closes a handler's breaker, lifts its pause and wakes its parked steps
// (two statements); ErrNotFound when no handler has the name.
func (e *Engine) ResumeHandler(ctx context.Context, name string) (Handler, error) {
	h, err := e.db.HandlerBreakerResume(ctx, name)
	if err != nil {
		return Handler{}, err
	}
	if _, err := e.db.JobWakeParked(ctx, name); err != nil {
		return Handler{}, err
	}
	return handlerOf(h), nil
}

// breakerCollector reports every handler's breaker state, sampled at most every 5 seconds
// (one read of the handlers table per interval, whatever the scrape rate).
type breakerCollector struct {
	db       *pg.DB
	mu       sync.Mutex
	at       time.Time
	handlers []pg.Handler
}

var (
	breakerStateDesc = prometheus.NewDesc("gendurable_handler_breaker_state",
		"1 for the state each handler's circuit breaker is in (closed, open, half_open), 0 for the others (sampled).",
		[]string{"handler", "state"}, nil)
	breakerPausedDesc = prometheus.NewDesc("gendurable_handler_paused",
		"1 while a handler is paused by its circuit breaker (open for longer than pause_after; resume it).",
		[]string{"handler"}, nil)
	breakerFailuresDesc = prometheus.NewDesc("gendurable_handler_consecutive_failures",
		"Consecutive breaker failures recorded for each handler (sampled).", []string{"handler"}, nil)
)

func (c *breakerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- breakerStateDesc
	ch <- breakerPausedDesc
	ch <- breakerFailuresDesc
}

func (c *breakerCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) > 5*time.Second {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		hs, err := c.db.HandlerList(ctx)
		cancel()
		if err == nil {
			c.handlers, c.at = hs, time.Now()
		}
	}
	for _, h := range c.handlers {
		for _, s := range [...]string{BreakerClosed, BreakerOpen, BreakerHalfOpen} {
			v := 0.0
			if h.Breaker.State == s {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(breakerStateDesc, prometheus.GaugeValue, v, h.Name, s)
		}
		paused := 0.0
		if h.Breaker.PausedAt != nil {
			paused = 1
		}
		ch <- prometheus.MustNewConstMetric(breakerPausedDesc, prometheus.GaugeValue, paused, h.Name)
		ch <- prometheus.MustNewConstMetric(breakerFailuresDesc, prometheus.GaugeValue, float64(h.Breaker.ConsecutiveFailures), h.Name)
	}
}
