package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
)

// completer writes step outcomes, many per statement. Each worker takes the first
// waiting outcome plus whatever else is queued (up to OutcomeBatch) and writes them with
// one statement, so batches form by themselves under load while a lone outcome is
// written at once (plus OutcomeLinger, when set). Every outcome stays fenced by its own
// lease token; the lease is heartbeated until its outcome is written.
type completer struct {
	eng     *engine.Engine
	cfg     Config
	metrics *Metrics
	log     *slog.Logger
	queue   chan pendingOutcome
	wg      sync.WaitGroup
}

type pendingOutcome struct {
	outcome engine.StepOutcome
	note    breakerNote
	done    func(*engine.OutcomeApplied, error)
}

func newCompleter(eng *engine.Engine, cfg Config, m *Metrics, log *slog.Logger) *completer {
	return &completer{eng: eng, cfg: cfg, metrics: m, log: log, queue: make(chan pendingOutcome, 4*cfg.OutcomeBatch)}
}

func (c *completer) start() {
	for range c.cfg.OutcomeWorkers {
		c.wg.Add(1)
		go func() { defer c.wg.Done(); c.work() }()
	}
}

// stop flushes what is queued and ends the workers (call once no step can submit).
func (c *completer) stop() {
	close(c.queue)
	c.wg.Wait()
}

func (c *completer) submit(o engine.StepOutcome, note breakerNote, done func(*engine.OutcomeApplied, error)) {
	c.queue <- pendingOutcome{outcome: o, note: note, done: done}
}

func (c *completer) work() {
	batch := make([]pendingOutcome, 0, c.cfg.OutcomeBatch)
	busy := false
	for first := range c.queue {
		batch = append(batch[:0], first)
		switch {
		case c.cfg.OutcomeLinger > 0:
			c.linger(&batch, c.cfg.OutcomeLinger)
		case busy && c.cfg.OutcomeBusyLinger > 0:
			// Under load (the last statement carried several outcomes) a short wait fills
			// the statement: fewer, fuller outcome statements for the same steps. Idle, a
			// lone outcome is written at once.
			c.linger(&batch, c.cfg.OutcomeBusyLinger)
		}
	drain:
		for len(batch) < c.cfg.OutcomeBatch {
			select {
			case p, ok := <-c.queue:
				if !ok {
					break drain
				}
				batch = append(batch, p)
			default:
				break drain
			}
		}
		busy = len(batch) > 1
		c.flush(batch)
	}
}

func (c *completer) linger(batch *[]pendingOutcome, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for len(*batch) < c.cfg.OutcomeBatch {
		select {
		case p, ok := <-c.queue:
			if !ok {
				return
			}
			*batch = append(*batch, p)
		case <-t.C:
			return
		}
	}
}

// flush writes one batch; a failed write is retried briefly (the leases cover the
// wait), then reported to each step, whose lease then expires and re-runs it.
func (c *completer) flush(batch []pendingOutcome) {
	outcomes := make([]engine.StepOutcome, len(batch))
	for i, p := range batch {
		outcomes[i] = p.outcome
	}
	var applied []engine.OutcomeApplied
	var err error
	for attempt, wait := 0, 50*time.Millisecond; attempt < 5; attempt, wait = attempt+1, 2*wait {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		applied, err = c.eng.ApplyOutcomes(ctx, outcomes)
		cancel()
		if err == nil || errors.Is(err, engine.ErrInvalid) {
			break
		}
		c.log.Warn("writing outcomes failed; retrying", "outcomes", len(batch), "err", err)
		time.Sleep(wait)
	}
	c.metrics.OutcomeBatch.Observe(float64(len(batch)))
	c.recordBreakers(batch)
	// By job and token: a stale outcome of a job can share the batch with its current one.
	type lease struct {
		id    int64
		token string
	}
	byLease := make(map[lease]*engine.OutcomeApplied, len(applied))
	for i := range applied {
		byLease[lease{applied[i].ID, applied[i].Token}] = &applied[i]
	}
	for _, p := range batch {
		if err != nil {
			p.done(nil, err)
			continue
		}
		p.done(byLease[lease{p.outcome.JobID, p.outcome.Token}], nil)
	}
}
