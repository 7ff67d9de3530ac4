package engine

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
)

// SetGate creates or changes a gate: at most limit executing jobs with concurrency key
// key, counted on shards slot rows (more shards, more independent credit chains).
func (e *Engine) SetGate(ctx context.Context, key string, limit, shards int) (Gate, error) {
	v := &validator{}
	v.keyText("key", &key)
	if limit < 1 || limit > 1_000_000 {
		v.add("limit", "must be between 1 and 1000000")
	}
	if shards < 1 || shards > 64 {
		v.add("shards", "must be between 1 and 64")
	}
	if err := v.err(); err != nil {
		return Gate{}, err
	}
	g, err := e.db.GateUpsert(ctx, key, limit, shards)
	if err != nil {
		return Gate{}, err
	}
	return gateOf(g), nil
}

// SetRateLimit creates or changes a rate limit of rate tokens per second and at most
// burst tokens stored per key.
func (e *Engine) SetRateLimit(ctx context.Context, name string, rate, burst float64) (RateLimit, error) {
	v := &validator{}
	v.name("name", name)
	if rate < 0 || rate > 1e6 {
		v.add("rate", "must be between 0 and 1000000 tokens per second")
	}
	if burst < 1 || burst > 1e9 {
		v.add("burst", "must be between 1 and 1000000000")
	}
	if err := v.err(); err != nil {
		return RateLimit{}, err
	}
	l, err := e.db.RateLimitUpsert(ctx, name, rate, burst)
	if err != nil {
		return RateLimit{}, err
	}
	return rateLimitOf(l), nil
}

// ReconcilerConfig tunes the Reconciler.
type ReconcilerConfig struct {
	// Interval between repairs (default 10s).
	Interval time.Duration
}

// Reconciler repairs gate slot counters from the executing jobs. Normal operation keeps
// them exact (the pick debits, the outcome and the reaper credit); the reconciler is the
// safety net for anything else (a job row edited by hand, a gate reshaped while full).
// It can only make a counter match the truth: slots held by executing jobs are never
// handed out twice.
type Reconciler struct {
	engine *Engine
	cfg    ReconcilerConfig
	log    *slog.Logger
	// OnRepair, when set, is called after each pass with the counters it changed.
	OnRepair func([]pg.SlotRepair, error)
	loop
}

// Validate reports the settings NewReconciler refuses.
func (c ReconcilerConfig) Validate() error {
	v := ConfigCheck{Service: "reconciler"}
	v.Check(c.Interval >= 0, "Interval", "", c.Interval, "must not be negative (0: the default, 10s)")
	return v.Err()
}

// NewReconciler returns a stopped reconciler; it panics when cfg.Validate refuses a
// setting.
func (e *Engine) NewReconciler(cfg ReconcilerConfig) *Reconciler {
	mustBeValid(cfg.Validate())
	if cfg.Interval == 0 {
		cfg.Interval = 10 * time.Second
	}
	return &Reconciler{engine: e, cfg: cfg, log: e.log.With("service", "reconciler")}
}

// Repair runs one pass.
func (r *Reconciler) Repair(ctx context.Context) ([]pg.SlotRepair, error) {
	repaired, err := r.engine.db.GateSlotsReconcile(ctx)
	for _, x := range repaired {
		r.log.Warn("gate slot counter repaired", "key", x.Key, "shard", x.Shard, "available", x.Available)
	}
	if r.engine.metrics != nil {
		r.engine.metrics.GateRepairs.Add(float64(len(repaired)))
	}
	return repaired, err
}

// Start repairs every Interval until Stop.
func (r *Reconciler) Start(ctx context.Context) {
	r.start(ctx, r.cfg.Interval, func(ctx context.Context) bool {
		repaired, err := r.Repair(ctx)
		if err != nil && ctx.Err() == nil {
			r.log.Error("gate reconciliation failed", "err", err)
		}
		if r.OnRepair != nil {
			r.OnRepair(repaired, err)
		}
		return false
	})
}

// QueueThrottled reports whether queue has due runnable jobs that its last empty pick
// did not claim (held back by a gate or a rate limit). Only a queue whose claims admit
// rows (JobClaimBatch, for admissionWindow after a claim met rows with a concurrency key
// or a rate limit) can hold any back: for the others it answers false without a
// statement. Their due rows that a pick did not claim are held by other processes'
// claims, which run them; with the probe, each such empty pick became another claim at
// the next finished step.
func (e *Engine) QueueThrottled(ctx context.Context, queue string) (bool, error) {
	if !e.admitting(queue) {
		return false, nil
	}
	ok, err := e.db.JobReadyExists(ctx, queue)
	if err != nil {
		return false, fmt.Errorf("engine: %w", err)
	}
	return ok, nil
}
