package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/gendurable/gendurable/internal/engine"
)

// completer writes step outcomes, many per statement. Its first worker takes the first
// waiting outcome plus whatever else is queued (up to OutcomeBatch) and writes them with
// one statement, so batches form by themselves under load while a lone outcome is
// written at once (plus OutcomeLinger, when set). The other workers write only overflow:
// when the first collects a full batch and more outcomes still wait, or its statement has
// run for flushOverdue with outcomes waiting (a statement held up by a lock must not hold
// every other outcome of the process back), one of them takes the next batch in parallel. One statement at a time writes fuller batches (rows
// per statement 61 → 149 in the bench's drain, JobApplyOutcomes 30.7 → 25.1 µs a step)
// and more statements run only when one cannot keep up. Every outcome stays fenced by
// its own lease token; the lease is heartbeated until its outcome is written.
type completer struct {
	tracer  trace.Tracer // nil when tracing is off
	eng     *engine.Engine
	cfg     Config
	metrics *Metrics
	log     *slog.Logger
	queue   chan pendingOutcome
	// overflow wakes an overflow worker: the first worker took a full batch and more wait,
	// or its statement is overdue.
	overflow chan struct{}
	// flushing is set while the first worker's statement runs; watchdog fires every
	// flushOverdue meanwhile and wakes an overflow worker when outcomes wait.
	flushing atomic.Bool
	watchdog *time.Timer
	// closing guards overflow against a late watchdog once stop closes it.
	closing sync.Mutex
	closed  bool
	first   sync.WaitGroup // the first worker
	others  sync.WaitGroup // the overflow workers
	// ctx bounds every write; giveUp cancels it (the dispatcher's Stop, when its context
	// ends): the write under way fails, and what is left is reported not written.
	ctx    context.Context
	giveUp context.CancelFunc
}

// pendingOutcome is a step's outcome waiting for the completer. It holds pointers only
// (the step and its outcome are on the heap already): the step's goroutine sends it on
// a small stack, and flush builds each StepOutcome on the completer's.
type pendingOutcome struct {
	step    *engine.Step
	outcome *engine.Outcome
	note    breakerNote
	done    func(*engine.OutcomeApplied, error)
}

func newCompleter(eng *engine.Engine, cfg Config, m *Metrics, log *slog.Logger) *completer {
	c := &completer{eng: eng, cfg: cfg, metrics: m, log: log, queue: make(chan pendingOutcome, 4*cfg.OutcomeBatch),
		overflow: make(chan struct{}, 1)}
	c.ctx, c.giveUp = context.WithCancel(context.Background())
	return c
}

// errGivenUp is the error of the outcomes the completer gave up writing at shutdown.
var errGivenUp = errors.New("the shutdown's deadline passed before the outcome was written")

// flushOverdue is how long the first worker's statement runs before waiting outcomes go
// to an overflow worker.
const flushOverdue = 50 * time.Millisecond

func (c *completer) start() {
	c.watchdog = time.AfterFunc(time.Hour, c.overdue)
	c.watchdog.Stop()
	c.first.Add(1)
	go func() { defer c.first.Done(); c.work() }()
	for range c.cfg.OutcomeWorkers - 1 {
		c.others.Add(1)
		go func() { defer c.others.Done(); c.workOverflow() }()
	}
}

// stop flushes what is queued and ends the workers (call once no step can submit). It
// returns once every outcome is written, or reported not written after giveUp.
func (c *completer) stop() {
	defer c.giveUp()
	close(c.queue)
	c.first.Wait()
	c.closing.Lock()
	c.closed = true
	close(c.overflow)
	c.closing.Unlock()
	c.others.Wait()
}

func (c *completer) submit(st *engine.Step, o *engine.Outcome, note breakerNote, done func(*engine.OutcomeApplied, error)) {
	c.queue <- pendingOutcome{step: st, outcome: o, note: note, done: done}
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
		c.take(&batch)
		busy = len(batch) > 1
		if len(batch) == c.cfg.OutcomeBatch && len(c.queue) > 0 {
			c.wakeOverflow()
		}
		c.flushing.Store(true)
		c.watchdog.Reset(flushOverdue)
		c.flush(batch)
		c.flushing.Store(false)
		c.watchdog.Stop()
	}
}

// wakeOverflow wakes one overflow worker (none is lost: one already woken takes what waits).
func (c *completer) wakeOverflow() {
	if c.cfg.OutcomeWorkers < 2 {
		return
	}
	c.closing.Lock()
	defer c.closing.Unlock()
	if c.closed {
		return
	}
	select {
	case c.overflow <- struct{}{}:
	default: // an overflow worker is woken already
	}
}

// overdue runs on the watchdog while the first worker's statement runs: waiting outcomes
// go to an overflow worker, and it fires again after flushOverdue until the statement ends.
func (c *completer) overdue() {
	if !c.flushing.Load() {
		return
	}
	if len(c.queue) > 0 {
		c.wakeOverflow()
	}
	c.watchdog.Reset(flushOverdue)
}

// workOverflow writes, each time it is woken, a batch of what waits (nothing when the
// first worker took it meanwhile).
func (c *completer) workOverflow() {
	batch := make([]pendingOutcome, 0, c.cfg.OutcomeBatch)
	for range c.overflow {
		batch = batch[:0]
		c.take(&batch)
		if len(batch) > 0 {
			c.flush(batch)
		}
	}
}

// take adds what is queued to batch, without waiting, up to OutcomeBatch.
func (c *completer) take(batch *[]pendingOutcome) {
	for len(*batch) < c.cfg.OutcomeBatch {
		select {
		case p, ok := <-c.queue:
			if !ok {
				return
			}
			*batch = append(*batch, p)
		default:
			return
		}
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

// The completer's retries, the one layer of them between a step's outcome and the
// database (ApplyOutcomes writes a batch once): the outcomes of a batch that were not
// written are written again, up to completerTries in all, after a pause that doubles from
// completerBackoffBase (engine.RetryDelay: jittered down to half: 0.375 to 0.75 s in all),
// each try taking up to completerTryTimeout. The steps' leases are heartbeated meanwhile.
const (
	completerTries       = 5
	completerBackoffBase = 50 * time.Millisecond
	completerBackoffMax  = 2 * time.Second
	completerTryTimeout  = 30 * time.Second
)

// flush writes one batch and reports each outcome's result to its step. The outcomes
// whose write failed are written again (completerTries), then reported failed: their
// leases then expire and the steps run again.
func (c *completer) flush(batch []pendingOutcome) {
	outcomes := make([]engine.StepOutcome, len(batch))
	for i, p := range batch {
		outcomes[i] = p.step.WithOutcome(*p.outcome)
	}
	span := c.traceOutcomes(batch)
	results := c.write(outcomes)
	if span != nil {
		span.End()
	}
	c.metrics.OutcomeBatch.Observe(float64(len(batch)))
	c.recordBreakers(batch)
	for i, p := range batch {
		switch r := &results[i]; {
		case r.Err != nil:
			p.done(nil, r.Err)
		case r.Applied:
			p.done(&r.OutcomeApplied, nil)
		default:
			p.done(nil, nil)
		}
	}
}

// write writes outcomes, and again those whose write failed (completerTries), until
// giveUp.
func (c *completer) write(outcomes []engine.StepOutcome) []engine.OutcomeResult {
	results := c.apply(outcomes)
	for try := 1; try < completerTries; try++ {
		again := unwritten(results)
		if len(again) == 0 || c.ctx.Err() != nil {
			break
		}
		c.log.Warn("writing outcomes failed; retrying", "outcomes", len(again), "err", results[again[0]].Err)
		pause := time.NewTimer(engine.RetryDelay(try, completerBackoffBase, completerBackoffMax))
		select {
		case <-pause.C:
		case <-c.ctx.Done():
			pause.Stop()
			for _, i := range again {
				results[i].Err = fmt.Errorf("%w (%w)", errGivenUp, results[i].Err)
			}
			return results
		}
		todo := make([]engine.StepOutcome, len(again))
		for k, i := range again {
			todo[k] = outcomes[i]
		}
		for k, r := range c.apply(todo) {
			results[again[k]] = r
		}
	}
	return results
}

// apply writes outcomes once; after giveUp, it reports them not written.
func (c *completer) apply(outcomes []engine.StepOutcome) []engine.OutcomeResult {
	if c.ctx.Err() != nil {
		results := make([]engine.OutcomeResult, len(outcomes))
		for i := range results {
			results[i].Err = errGivenUp
		}
		return results
	}
	ctx, cancel := context.WithTimeout(c.ctx, completerTryTimeout)
	defer cancel()
	results := c.eng.ApplyOutcomes(ctx, outcomes)
	if c.ctx.Err() != nil {
		for i := range results {
			if results[i].Err != nil {
				results[i].Err = fmt.Errorf("%w (%w)", errGivenUp, results[i].Err)
			}
		}
	}
	return results
}

// unwritten lists the results of outcomes whose write failed and may succeed again (not
// those the database refused as invalid).
func unwritten(results []engine.OutcomeResult) []int {
	var again []int
	for i := range results {
		if err := results[i].Err; err != nil && !errors.Is(err, engine.ErrInvalid) {
			again = append(again, i)
		}
	}
	return again
}
