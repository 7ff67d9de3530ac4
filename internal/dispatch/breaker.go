package dispatch

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
)

// The circuit breaker of each handler (docs/flow-control.md, "Circuit breaker"). Its state
// lives on the handler's row and comes with every claimed step (the claim's handlers
// join), so a healthy handler costs nothing: its steps are launched as claimed and its
// successes write nothing. What costs a statement:
//   - an outcome batch holding breaker failures, or successes of a handler with failures
//     recorded: one HandlerBreakerRecord for the batch (completer.recordBreakers);
//   - a claimed step of an open handler: parked unrun (one LeaseParkMany per claim
//     batch), one per batch until the breaker's next probe and the rest for ParkFor,
//     except the one step that wins the probe (one HandlerBreakerProbe per handler and
//     claim batch once the probe is due) and whose result is recorded by one
//     HandlerBreakerProbeResult; a success closes the breaker and wakes every step it
//     parked (one JobWakeParked).

// breakerVerdict is what one webhook call tells its handler's breaker.
type breakerVerdict uint8

const (
	verdictNone    breakerVerdict = iota // not a call (no handler, too large) or an answer that says nothing (3xx, 4xx)
	verdictSuccess                       // a 2xx answer, whatever the step's outcome (fail and retry included)
	verdictFailure                       // connection refused or reset, timeout, 5xx
)

// verdictOf classifies a call's outcome. 429 is not a failure: the handler is alive and
// asks for less, which Retry-After already gives it.
func verdictOf(o *engine.Outcome) breakerVerdict {
	switch {
	case o.Label == "connection_error" || o.Label == "timeout":
		return verdictFailure
	case o.HTTPStatus == nil:
		if o.Label == "bad_response" { // the answer could not be read (reset mid-answer)
			return verdictFailure
		}
		return verdictNone
	case *o.HTTPStatus >= 500:
		return verdictFailure
	case *o.HTTPStatus >= 200 && *o.HTTPStatus < 300:
		return verdictSuccess
	}
	return verdictNone
}

// breakerNote rides with an outcome to the completer: what its call told the breaker, and
// whether the claim showed failures recorded (only then does a success write).
type breakerNote struct {
	handler       string
	verdict       breakerVerdict
	knownFailures bool
}

func noteOf(st *engine.Step, v breakerVerdict) breakerNote {
	return breakerNote{handler: st.Handler, verdict: v,
		knownFailures: st.ConsecutiveFailures != nil && *st.ConsecutiveFailures > 0}
}

// breakerTallies sums a batch's notes per handler, in batch order: a success resets the
// count (when failures may be recorded), failures after it add up.
func breakerTallies(batch []pendingOutcome) []engine.BreakerTally {
	var tallies []engine.BreakerTally
	index := map[string]int{}
	for _, p := range batch {
		n := p.note
		if n.verdict == verdictNone || (n.verdict == verdictSuccess && !n.knownFailures) {
			if n.verdict == verdictSuccess { // a success still ends a run counted in this batch
				if i, ok := index[n.handler]; ok && tallies[i].Failures > 0 {
					tallies[i].Failures, tallies[i].Reset = 0, true
				}
			}
			continue
		}
		i, ok := index[n.handler]
		if !ok {
			i = len(tallies)
			index[n.handler] = i
			tallies = append(tallies, engine.BreakerTally{Handler: n.handler})
		}
		if n.verdict == verdictFailure {
			tallies[i].Failures++
		} else {
			tallies[i].Failures, tallies[i].Reset = 0, true
		}
	}
	out := tallies[:0]
	for _, t := range tallies {
		if t.Failures > 0 || t.Reset {
			out = append(out, t)
		}
	}
	return out
}

// recordBreakers writes a flushed batch's breaker tallies: nothing when the batch holds
// no failure and no success of a handler with failures recorded (the healthy path).
func (c *completer) recordBreakers(batch []pendingOutcome) {
	tallies := breakerTallies(batch)
	if len(tallies) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	recorded, err := c.eng.RecordBreakerFailures(ctx, tallies, c.cfg.now())
	if err != nil {
		c.log.Warn("recording circuit breaker failures failed", "err", err)
		return
	}
	for _, r := range recorded {
		if r.Opened {
			c.metrics.BreakerOpens.WithLabelValues(r.Handler).Inc()
			c.log.Warn("circuit breaker opened: the handler's steps are parked until a probe succeeds",
				"handler", r.Handler, "consecutive_failures", r.ConsecutiveFailures)
		}
	}
}

// probes are the claimed steps that carry their handler's probe, by lease token.
type probes struct{ m sync.Map }

func (p *probes) add(token string)       { p.m.Store(token, struct{}{}) }
func (p *probes) take(token string) bool { _, ok := p.m.LoadAndDelete(token); return ok }

// now is the breaker statements' clock: nil (the database's) unless Config.Now is set.
func (c *Config) now() *time.Time {
	if c.Now == nil {
		return nil
	}
	t := c.Now()
	return &t
}

// halfOpenRecheck is how long steps claimed while a probe runs are parked for.
const halfOpenRecheck = time.Second

// admitSteps returns the claimed steps to call and parks the others: the steps of a
// handler whose breaker is open (but the one that wins the probe), half-open or paused.
// A step whose claim showed a closed breaker is launched as it is, at no cost.
func (d *Dispatcher) admitSteps(ctx context.Context, steps []engine.Step) []engine.Step {
	var parks []engine.Park
	var parkedBy map[string]int
	var asked map[string]engine.BreakerProbe // at most one probe statement per handler and batch
	now := time.Now()
	if d.cfg.Now != nil {
		now = d.cfg.Now()
	}
	out := steps[:0]
	for _, st := range steps {
		if st.BreakerState == nil || (*st.BreakerState == engine.BreakerClosed && st.HandlerPausedAt == nil) {
			out = append(out, st)
			continue
		}
		b, ok := asked[st.Handler]
		if !ok {
			b = engine.BreakerProbe{State: *st.BreakerState, NextProbeAt: st.BreakerNextProbeAt, PausedAt: st.HandlerPausedAt}
			if b.PausedAt == nil && b.NextProbeAt != nil && !now.Before(*b.NextProbeAt) {
				var err error
				if b, err = d.eng.AskBreakerProbe(ctx, st.Handler, d.cfg.now()); err != nil {
					if ctx.Err() == nil {
						d.log.Warn("asking for a circuit breaker probe failed; calling the step", "handler", st.Handler, "err", err)
					}
					out = append(out, st)
					continue
				}
			}
			if asked == nil {
				asked = map[string]engine.BreakerProbe{}
			}
			asked[st.Handler] = b
		}
		switch {
		case b.Probe:
			d.probes.add(st.LeaseToken)
			d.metrics.BreakerProbes.WithLabelValues(st.Handler).Inc()
			b.Probe = false // the other steps of the batch wait for its result
			asked[st.Handler] = b
			out = append(out, st)
			continue
		case b.State == engine.BreakerClosed && b.PausedAt == nil: // closed meanwhile
			out = append(out, st)
			continue
		}
		// The first parked step of a handler in each claim comes back for the next probe;
		// the others stay away for ParkFor (or until the breaker closes and wakes them),
		// so a deep backlog costs one claim and one park per step per ParkFor, not per
		// probe interval.
		if parkedBy == nil {
			parkedBy = map[string]int{}
		}
		reserve := parkedBy[st.Handler] == 0 && b.PausedAt == nil
		parks = append(parks, engine.Park{ID: st.ID, Token: st.LeaseToken, At: d.parkUntil(b, now, reserve)})
		parkedBy[st.Handler]++
		if st.Span != nil { // given back unrun: the attempt's span ends here
			endParkedSpan(st.Span)
		}
	}
	if len(parks) > 0 {
		if _, err := d.eng.ParkSteps(ctx, parks); err != nil && ctx.Err() == nil {
			d.log.Warn("parking the steps of an open circuit breaker failed; their leases will expire",
				"steps", len(parks), "err", err)
		}
		for h, n := range parkedBy {
			d.metrics.BreakerParked.WithLabelValues(h).Add(float64(n))
		}
	}
	return out
}

// parkUntil is when a parked step comes back. The probe's reserve: just after the
// breaker's next probe (spread over a quarter of the wait, so that many processes'
// reserves do not arrive together), or a second while a probe runs. Any other step:
// spread over the second half of ParkFor.
func (d *Dispatcher) parkUntil(b engine.BreakerProbe, now time.Time, reserve bool) time.Time {
	var wait, spread time.Duration
	switch {
	case !reserve:
		wait = d.cfg.ParkFor / 2
		spread = d.cfg.ParkFor / 2
	case b.State == engine.BreakerOpen && b.NextProbeAt != nil:
		wait = max(b.NextProbeAt.Sub(now), 0)
		spread = wait / 4
	default: // half-open: a probe is running
		wait = halfOpenRecheck
		spread = halfOpenRecheck / 4
	}
	at := now.Add(wait + rand.N(max(spread, time.Millisecond)))
	if d.cfg.Now != nil { // parked times are compared with the database's clock
		at = time.Now().Add(at.Sub(now))
	}
	return at
}

// wakeParked wakes the steps handler's breaker parked, now that it closed: a step whose
// wake is lost waits for its ParkFor (minutes), so the wake has a deadline of its own
// (not what recording the probe left of one) and is tried twice; on Citus it is one
// statement on every shard, which a busy cluster can hold past a few seconds.
func (d *Dispatcher) wakeParked(handler string) (int64, error) {
	var err error
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var woken int64
		woken, err = d.eng.WakeParked(ctx, handler)
		cancel()
		if err == nil {
			return woken, nil
		}
	}
	return 0, err
}

// recordProbe records the outcome of the probe this step carried (if it carried one):
// answered is false for a call abandoned without an answer (shutdown, lease lost), whose
// probe is given up and sent again after its deadline. Any answer that is not a breaker
// failure (a 4xx too: the endpoint is up) closes the breaker. It reports whether the
// step carried the probe.
func (d *Dispatcher) recordProbe(st *engine.Step, v breakerVerdict, answered bool) bool {
	if !d.probes.take(st.LeaseToken) {
		return false
	}
	if !answered {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	state, next, err := d.eng.RecordBreakerProbe(ctx, st.Handler, v != verdictFailure, d.cfg.now())
	switch {
	case err != nil:
		d.log.Warn("recording a circuit breaker probe failed", "handler", st.Handler, "err", err)
	case state == engine.BreakerClosed:
		woken, err := d.wakeParked(st.Handler)
		if err != nil {
			d.log.Warn("waking the steps a circuit breaker parked failed; they come back within ParkFor",
				"handler", st.Handler, "err", err)
		}
		d.log.Info("circuit breaker closed: the probe succeeded", "handler", st.Handler, "woken", woken)
	default:
		d.log.Info("circuit breaker probe failed; open again", "handler", st.Handler, "next_probe_at", next)
	}
	return true
}
