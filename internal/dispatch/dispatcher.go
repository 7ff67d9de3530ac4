// Package dispatch runs steps: a feeder per queue claims runnable steps in batches, each
// step is POSTed to its handler's webhook (signed, Standard Webhooks), leases are kept
// alive by one heartbeat statement per tick, and the answers are written back through
// the engine in batched outcome statements.
package dispatch

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/webhookclient"
)

// Config tunes a Dispatcher. Zero values take the defaults given.
type Config struct {
	// MaxBodyBytes caps step request and response bodies (default 1 MiB).
	MaxBodyBytes int
	// PollMin and PollMax bound the idle polling backoff of a feeder (default 50ms, 1s).
	// NOTIFY wakes a feeder at once; polling catches delayed jobs and missed notifies.
	PollMin, PollMax time.Duration
	// QueueRefresh is how often queue settings (paused, max_in_flight, batch) and new
	// queues are picked up (default 1s).
	QueueRefresh time.Duration
	// ShutdownGrace is how long Stop lets running steps finish before it abandons them
	// to lease expiry (default 15s).
	ShutdownGrace time.Duration
	// OutcomeWorkers is how many outcome statements may run at once (default 2). The
	// first writes every batch; the others only a full batch that the first left waiting
	// (fewer, fuller statements cost Postgres less: see completer).
	OutcomeWorkers int
	// OutcomeBatch is the most outcomes one statement writes (default 256; 1 turns
	// batching off).
	OutcomeBatch int
	// OutcomeLinger is how long a flush waits for more outcomes once one is pending
	// (default 0: flush at once; batches still form while a flush is in progress).
	OutcomeLinger time.Duration
	// OutcomeBusyLinger is how long a flush waits for more outcomes when the previous
	// statement of its worker carried more than one (under load; default 1ms, negative
	// turns it off). Ignored when OutcomeLinger is set.
	OutcomeBusyLinger time.Duration
	// DialControl vets every address a webhook call dials (the SSRF guard); nil allows all.
	DialControl func(network, address string, c syscall.RawConn) error
	// TLS is the base configuration of https webhook connections (nil: the system's roots).
	TLS *tls.Config
	// Queues restricts the dispatcher to these queues (default: every queue).
	Queues []string
	// OnPaused, when set, is called each time a feeder finds its queue paused and stops
	// claiming (tests wait on it instead of sleeping).
	OnPaused func(queue string)
	// ParkFor is how long the claimed steps of an open (or paused) circuit breaker are
	// parked for, beyond the one kept back per claim for the next probe (default 5m):
	// they come back spread over its second half, or at once when the breaker closes.
	ParkFor time.Duration
	// Now is the circuit breaker's clock (nil: the database's now()); tests move it.
	Now func() time.Time
	// TracerProvider, when set, turns the dispatcher's spans on (claims, waits, step
	// attempts, outcome batches: tracing.go). Nil (the default) makes none; a job's trace
	// context still reaches its webhook calls.
	TracerProvider trace.TracerProvider
}

// Validate reports the settings New refuses, each named with its environment variable
// (if the server has one for it).
func (c Config) Validate() error {
	v := engine.ConfigCheck{Service: "dispatch"}
	v.Check(c.MaxBodyBytes >= 0, "MaxBodyBytes", "", c.MaxBodyBytes, "must not be negative (0: the default, 1 MiB)")
	v.Check(c.PollMin >= 0, "PollMin", "", c.PollMin, "must not be negative (0: the default, 50ms)")
	v.Check(c.PollMax >= 0, "PollMax", "", c.PollMax, "must not be negative (0: the default, 1s)")
	if set := c; c.PollMin > 0 || c.PollMax > 0 {
		set.applyDefaults()
		v.Check(set.PollMin <= set.PollMax, "PollMin", "", set.PollMin, fmt.Sprintf("must not be above PollMax (%s)", set.PollMax))
	}
	v.Check(c.QueueRefresh >= 0, "QueueRefresh", "", c.QueueRefresh, "must not be negative (0: the default, 1s)")
	v.Check(c.ShutdownGrace >= 0, "ShutdownGrace", "GENDURABLE_SHUTDOWN_GRACE", c.ShutdownGrace,
		"must not be negative (0: the default, 15s)")
	v.Check(c.OutcomeWorkers >= 0, "OutcomeWorkers", "GENDURABLE_OUTCOME_WORKERS", c.OutcomeWorkers,
		"must not be negative (0: the default, 2)")
	v.Check(c.OutcomeBatch >= 0 && c.OutcomeBatch <= engine.MaxBatch, "OutcomeBatch", "GENDURABLE_OUTCOME_BATCH",
		c.OutcomeBatch, fmt.Sprintf("must be from 1 to %d, the most one statement writes (0: the default, 256)", engine.MaxBatch))
	v.Check(c.OutcomeLinger >= 0, "OutcomeLinger", "GENDURABLE_OUTCOME_LINGER", c.OutcomeLinger,
		"must not be negative (0: no linger)")
	for i, q := range c.Queues {
		v.Check(q != "", fmt.Sprintf("Queues[%d]", i), "GENDURABLE_QUEUES", `""`, "a queue name cannot be empty")
	}
	v.Check(c.ParkFor >= 0, "ParkFor", "", c.ParkFor, "must not be negative (0: the default, 5m)")
	return v.Err()
}

func (c *Config) applyDefaults() {
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 1 << 20
	}
	if c.PollMin == 0 {
		c.PollMin = 50 * time.Millisecond
	}
	if c.PollMax == 0 {
		c.PollMax = time.Second
	}
	if c.QueueRefresh == 0 {
		c.QueueRefresh = time.Second
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = 15 * time.Second
	}
	if c.OutcomeWorkers == 0 {
		c.OutcomeWorkers = 2
	}
	if c.OutcomeBusyLinger == 0 {
		c.OutcomeBusyLinger = time.Millisecond
	}
	if c.OutcomeBatch == 0 {
		c.OutcomeBatch = 256
	}
	if c.ParkFor == 0 {
		c.ParkFor = 5 * time.Minute
	}
}

// Dispatcher runs the steps of every queue (or of Config.Queues) for one process.
type Dispatcher struct {
	eng     *engine.Engine
	cfg     Config
	log     *slog.Logger
	metrics *Metrics
	client  *webhookclient.Client

	leases    *leaseRegistry
	completer *completer
	tracer    trace.Tracer // nil when tracing is off
	runners   *stepRunners
	probes    probes   // the steps carrying their handler's circuit breaker probe
	signers   sync.Map // signing secret → *webhook.Signer
	// webhookSeries holds the WebhookDuration series by handler and status class,
	// replaced whole under webhookSeriesMu when one is added: see webhookObserver.
	webhookSeries   atomic.Pointer[map[webhookSeriesKey]prometheus.Observer]
	webhookSeriesMu sync.Mutex
	// signerCount counts signers made since the cache was last cleared.
	signerCount atomic.Int64

	mu      sync.Mutex
	feeders map[string]*feeder

	runCtx  context.Context // feeders, listener, refresher: cancelled first at Stop
	stopRun context.CancelFunc
	// callCtx is the heartbeats': cancelled at the end of Stop, once the last outcome is
	// written or given up (the calls are aborted through leases).
	callCtx    context.Context
	stopCalls  context.CancelFunc
	background sync.WaitGroup
	steps      sync.WaitGroup
	running    atomic.Int64
	started    bool
	stopOnce   sync.Once
}

// New returns a stopped dispatcher. It panics when cfg.Validate refuses a setting: a
// dispatcher that cannot run fails when it is made (the server validates its
// configuration first, so an operator meets the error, not the panic).
func New(eng *engine.Engine, cfg Config, log *slog.Logger, metrics *Metrics) *Dispatcher {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	cfg.applyDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	d := &Dispatcher{eng: eng, cfg: cfg, log: log.With("service", "dispatcher"), metrics: metrics,
		feeders: map[string]*feeder{}}
	d.client = webhookclient.New(webhookclient.Config{Control: cfg.DialControl, TLS: cfg.TLS})
	d.leases = newLeaseRegistry()
	if cfg.TracerProvider != nil {
		d.tracer = cfg.TracerProvider.Tracer("github.com/gendurable/gendurable/internal/dispatch")
	}
	d.completer = newCompleter(eng, cfg, metrics, d.log)
	d.completer.tracer = d.tracer
	d.runners = newStepRunners(func(t stepTask) { d.runStep(t.ctl, t.f, t.st) }, runnerIdle)
	return d
}

// Start begins claiming and running steps.
func (d *Dispatcher) Start(ctx context.Context) {
	d.runCtx, d.stopRun = context.WithCancel(context.WithoutCancel(ctx))
	d.callCtx, d.stopCalls = context.WithCancel(context.WithoutCancel(ctx))
	d.started = true
	d.eng.SetLocalClaims(d.claimsAtOnce)
	d.completer.start()
	d.background.Add(3)
	go func() { defer d.background.Done(); d.refreshLoop() }()
	go func() { defer d.background.Done(); d.listen() }()
	go func() { defer d.background.Done(); d.heartbeatLoop() }()
}

// Stop stops claiming, lets running steps finish for up to ShutdownGrace (or until ctx
// ends), then abandons the calls still running. It writes the outcomes of the steps that
// finished until ctx ends, heartbeating their leases meanwhile, and gives up on the rest:
// the leases of abandoned steps and unwritten outcomes expire and the reaper runs them
// again (at-least-once; nothing is lost). It returns by the time ctx ends.
func (d *Dispatcher) Stop(ctx context.Context) {
	if !d.started {
		return
	}
	d.stopOnce.Do(func() { d.stop(ctx) })
}

func (d *Dispatcher) stop(ctx context.Context) {
	d.eng.SetLocalClaims(nil) // new work wakes the other processes again
	d.stopRun()               // feeders, listener and refresher end; no more claims
	d.mu.Lock()
	for _, f := range d.feeders {
		f.stopAndWait()
	}
	d.mu.Unlock()
	finished := make(chan struct{})
	go func() { d.steps.Wait(); close(finished) }()
	grace := time.NewTimer(d.cfg.ShutdownGrace)
	defer grace.Stop()
	select {
	case <-finished:
	case <-grace.C:
		d.log.Warn("shutdown grace period over; abandoning running steps to lease expiry", "running", d.running.Load())
	case <-ctx.Done():
		d.log.Warn("shutdown cut short; abandoning running steps to lease expiry", "running", d.running.Load())
	}
	d.leases.abortAll(errShutdown)
	// The outcomes still to write are written until ctx ends, then given up: a step
	// waiting for room in the completer's queue then gets it at once.
	stopWatching := context.AfterFunc(ctx, d.completer.giveUp)
	defer stopWatching()
	d.steps.Wait()
	d.runners.stop()
	d.completer.stop()
	d.stopCalls() // the heartbeats: no outcome is left to write
	d.background.Wait()
	d.client.CloseIdle() // no call is left: a stopped dispatcher holds no webhook connection
}

// refreshLoop reloads queue settings and starts feeders for new queues.
func (d *Dispatcher) refreshLoop() {
	t := time.NewTicker(d.cfg.QueueRefresh)
	defer t.Stop()
	for {
		d.refreshQueues()
		select {
		case <-d.runCtx.Done():
			return
		case <-t.C:
		}
	}
}

func (d *Dispatcher) refreshQueues() {
	// The claims' plans follow the table's size (a plan made while jobs was small scans it whole).
	if grown, pages, err := d.eng.ReplanIfGrown(d.runCtx); err != nil && d.runCtx.Err() == nil {
		d.log.Warn("reading the jobs table's size failed", "err", err)
	} else if grown {
		d.log.Info("the jobs table grew several times over: database connections reopened so that statements are planned again", "pages", pages)
	}
	queues, err := d.eng.ListQueueSettings(d.runCtx)
	if err != nil {
		if d.runCtx.Err() == nil {
			d.log.Error("loading queue settings failed", "err", err)
		}
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.runCtx.Err() != nil {
		return
	}
	for _, q := range queues {
		if !d.serves(q.Name) {
			continue
		}
		f, ok := d.feeders[q.Name]
		if !ok {
			f = newFeeder(d, q)
			d.feeders[q.Name] = f
			f.start()
			continue
		}
		f.update(q)
	}
}

func (d *Dispatcher) serves(queue string) bool {
	if len(d.cfg.Queues) == 0 {
		return true
	}
	for _, q := range d.cfg.Queues {
		if q == queue {
			return true
		}
	}
	return false
}

// listen wakes the feeder of every queue named by a NOTIFY; an unknown queue (just
// created by an insert) triggers a settings refresh.
func (d *Dispatcher) listen() {
	d.eng.ListenForWork(d.runCtx, func(queue string) {
		if queue == "" { // (re)connected: anything may have been missed, settings too
			d.refreshQueues()
			d.wakeAll()
			return
		}
		if queue == engine.SettingsChanged { // a queue's settings changed: reload them now
			d.refreshQueues()
			return
		}
		d.mu.Lock()
		f, ok := d.feeders[queue]
		d.mu.Unlock()
		if ok {
			f.wake()
		} else if d.serves(queue) {
			d.refreshQueues()
		}
	}, func(err error) {
		d.metrics.ListenErrors.Inc()
		d.log.Warn("LISTEN connection lost; reconnecting (polling covers the gap)", "err", err)
	})
}

// claimsAtOnce reports whether this dispatcher claims at once rows new runnable rows of
// queue: it serves the queue and the queue's feeder has room for them. The NOTIFY of
// work it will claim names this process, and the other processes' dispatchers let it
// pass (pg.WorkNotice): with each process woken by every insert, all of them claimed
// the same rows at once, each claim but one coming back empty or skipping the rows the
// first held. (An outcome that makes its own job runnable wakes only this process's
// feeder, without a NOTIFY; the outcomes' NOTIFYs, for parents woken and children
// spawned, wake every process.)
func (d *Dispatcher) claimsAtOnce(queue string, rows int) bool {
	d.mu.Lock()
	f := d.feeders[queue]
	d.mu.Unlock()
	return f != nil && f.hasRoomFor(rows)
}

func (d *Dispatcher) wakeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, f := range d.feeders {
		f.wake()
	}
}

// errLeaseLost is the abort cause of a call whose lease a heartbeat found lost.
var errLeaseLost = errors.New("lease lost")

// errShutdown is the abort cause of the calls still running when the shutdown grace
// period ends.
var errShutdown = errors.New("the shutdown grace period is over")
