package dispatch

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gendurable/gendurable/internal/engine"
)

// feeder keeps up to max_in_flight steps of one queue running: it claims in batches,
// refills as steps finish, wakes on NOTIFY, and polls with backoff while idle.
type feeder struct {
	d        *Dispatcher
	queue    string
	settings atomic.Pointer[engine.Queue]
	inFlight atomic.Int64
	// A fair queue's steps in flight per fairness key (what its claims' shares are cut by).
	fairMu       sync.Mutex
	fairInFlight map[string]int
	gauge        prometheus.Gauge // gendurable_in_flight_steps{queue}
	wakeCh       chan struct{}    // new work may be ready (NOTIFY, a runnable outcome)
	slotCh       chan struct{}    // a step finished and freed its slot
	ctx          context.Context
	cancel       context.CancelFunc
	done         chan struct{}
}

func newFeeder(d *Dispatcher, q engine.Queue) *feeder {
	f := &feeder{d: d, queue: q.Name, wakeCh: make(chan struct{}, 1), slotCh: make(chan struct{}, 1),
		done: make(chan struct{})}
	f.settings.Store(&q)
	f.gauge = d.metrics.InFlight.WithLabelValues(q.Name)
	f.ctx, f.cancel = context.WithCancel(d.runCtx)
	return f
}

func (f *feeder) start() { go f.loop() }

func (f *feeder) stopAndWait() {
	f.cancel()
	<-f.done
}

// update takes new settings; they apply from the next claim.
func (f *feeder) update(q engine.Queue) {
	old := f.settings.Swap(&q)
	if old.Paused != q.Paused || old.MaxInFlight != q.MaxInFlight || old.Batch != q.Batch {
		f.wake()
	}
}

// hasRoomFor reports whether the feeder would claim rows new rows at once: running, with
// free slots for all of them and not waiting for more slots to free first.
func (f *feeder) hasRoomFor(rows int) bool {
	s := f.settings.Load()
	if s.Paused || f.ctx.Err() != nil {
		return false
	}
	free := s.MaxInFlight - int(f.inFlight.Load())
	return free >= max(rows, claimThreshold(s))
}

// claimThreshold is the free slots a feeder under a backlog waits for before it claims:
// fewer, fuller picks rather than one row per finished step.
func claimThreshold(s *engine.Queue) int {
	return max(1, min(s.Batch, s.MaxInFlight)/2)
}

func (f *feeder) wake() {
	select {
	case f.wakeCh <- struct{}{}:
	default:
	}
}

func (f *feeder) slotFreed() {
	select {
	case f.slotCh <- struct{}{}:
	default:
	}
}

func (f *feeder) loop() {
	defer close(f.done)
	d := f.d
	poll := d.cfg.PollMin
	backlog := false
	for f.ctx.Err() == nil {
		s := f.settings.Load()
		if s.Paused {
			if d.cfg.OnPaused != nil {
				d.cfg.OnPaused(f.queue)
			}
			f.waitFor(f.wakeCh, d.cfg.PollMax)
			continue
		}
		free := s.MaxInFlight - int(f.inFlight.Load())
		want := min(free, s.Batch)
		// Under a backlog, wait for a worthwhile number of free slots rather than
		// claiming one row per finished step: fewer, fuller picks.
		if want <= 0 {
			f.waitFor(f.slotCh, d.cfg.PollMax)
			continue
		}
		if backlog && want < claimThreshold(s) && f.inFlight.Load() > 0 {
			if !f.waitFor(f.slotCh, d.cfg.PollMax) {
				// No step ended for a while: the steps in flight are slow ones, and the
				// slots that are free would sit idle behind them. Claim them.
				backlog = false
			}
			continue
		}
		started := time.Now()
		var steps []engine.Step
		var contended int
		var err error
		if s.Fairness == engine.FairnessRoundRobin {
			// the keys' shares are cut from this process's slots for the queue
			steps, err = d.eng.ClaimFair(f.ctx, f.queue, want, s.MaxInFlight, f.fairCounts())
		} else {
			steps, contended, err = d.eng.Claim(f.ctx, f.queue, want)
		}
		d.metrics.Picks.WithLabelValues(f.queue).Inc()
		d.metrics.PickDuration.WithLabelValues(f.queue).Observe(time.Since(started).Seconds())
		if contended > 0 {
			d.metrics.PickContended.WithLabelValues(f.queue).Add(float64(contended))
		}
		if err != nil {
			if f.ctx.Err() == nil {
				d.log.Error("pick failed", "queue", f.queue, "err", err)
			}
			f.waitFor(f.wakeCh, poll)
			poll = min(2*poll, d.cfg.PollMax)
			continue
		}
		d.metrics.PickRows.WithLabelValues(f.queue).Observe(float64(len(steps)))
		if d.tracer != nil && len(steps) > 0 {
			d.traceClaim(f.queue, started, steps)
		}
		claimed := len(steps)
		admitted := d.admitSteps(f.ctx, steps) // parks the steps of open circuit breakers
		for i := range admitted {
			f.launch(&admitted[i])
		}
		if claimed == want {
			backlog = true
			poll = d.cfg.PollMin
			continue
		}
		backlog = false
		if len(steps) > 0 && s.Fairness == engine.FairnessRoundRobin {
			// A fair claim comes back short when keys are at their shares or caps, work
			// left behind them: claim again when a step ends and frees a key's slot. On
			// Citus, when a worthwhile number of slots is free, as under a backlog (each
			// fair claim visits every shard with the queue's keys: claiming at each step's
			// end made a claim of a few rows per step, 0.08x an unfair queue's drain).
			poll = d.cfg.PollMin
			backlog = d.eng.FairClaimVisitsShards()
			f.waitFor(f.wakeCh, poll, f.slotCh)
			continue
		}
		if len(steps) > 0 {
			poll = d.cfg.PollMin
		} else if throttled, err := d.eng.QueueThrottled(f.ctx, f.queue); err == nil && throttled {
			// Due work held back by a gate or a rate limit: retry soon (a token refills,
			// a slot comes back when a step ends), without backing off as when idle.
			d.metrics.PickThrottled.WithLabelValues(f.queue).Inc()
			f.waitFor(f.wakeCh, d.cfg.PollMin, f.slotCh)
			continue
		}
		f.waitFor(f.wakeCh, poll)
		if len(steps) == 0 {
			poll = min(2*poll, d.cfg.PollMax)
		}
	}
}

// waitFor blocks until ch (or also) fires, timeout passes or the feeder stops, and
// says whether a channel fired.
func (f *feeder) waitFor(ch <-chan struct{}, timeout time.Duration, also ...<-chan struct{}) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	var other <-chan struct{}
	if len(also) > 0 {
		other = also[0]
	}
	select {
	case <-ch:
	case <-other:
	case <-t.C:
		return false
	case <-f.ctx.Done():
		return false
	}
	return true
}

// launch starts one claimed step.
func (f *feeder) launch(st *engine.Step) {
	d := f.d
	if st.FairnessKey != nil {
		f.fairMu.Lock()
		if f.fairInFlight == nil {
			f.fairInFlight = map[string]int{}
		}
		f.fairInFlight[*st.FairnessKey]++
		f.fairMu.Unlock()
	}
	f.inFlight.Add(1)
	d.running.Add(1)
	d.steps.Add(1)
	f.gauge.Inc()
	ctl := new(callControl)
	d.leases.add(st.ID, st.LeaseToken, ctl)
	d.runners.run(stepTask{ctl: ctl, f: f, st: st})
}

// fairCounts copies the fair queue's steps in flight per fairness key.
func (f *feeder) fairCounts() map[string]int {
	f.fairMu.Lock()
	defer f.fairMu.Unlock()
	return maps.Clone(f.fairInFlight)
}

// release frees a step's slot.
func (f *feeder) release(st *engine.Step) {
	d := f.d
	if st.FairnessKey != nil {
		f.fairMu.Lock()
		if f.fairInFlight[*st.FairnessKey]--; f.fairInFlight[*st.FairnessKey] <= 0 {
			delete(f.fairInFlight, *st.FairnessKey)
		}
		f.fairMu.Unlock()
	}
	f.inFlight.Add(-1)
	d.running.Add(-1)
	f.gauge.Dec()
	f.slotFreed()
	d.steps.Done()
}
