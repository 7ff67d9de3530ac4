package engine

import (
	"context"
	"log/slog"
	"time"
)

// GCConfig tunes the collector of finished jobs.
type GCConfig struct {
	// Retention is how long finished jobs are kept (default 7 days); a queue's own
	// retention (queues.retention) wins for its jobs.
	Retention time.Duration
	// Interval between sweeps (default 1 minute); a full batch is followed at once.
	Interval time.Duration
	// Batch is the most jobs one delete removes (default 1000).
	Batch int
}

// GC deletes finished jobs past their retention, with their signals, in batches: select
// at most Batch ids, then delete by primary key. Children of a live parent are kept until
// the parent finishes. Their steps are not deleted here: HistoryPartitions drops them a
// partition at a time. Safe to run in every process.
type GC struct {
	engine *Engine
	cfg    GCConfig
	log    *slog.Logger
	// OnSweep, when set, is called after each sweep with the jobs it deleted.
	OnSweep func(deleted int, err error)
	loop
}

// Validate reports the settings NewGC refuses.
func (c GCConfig) Validate() error {
	v := ConfigCheck{Service: "gc"}
	v.Check(c.Retention >= 0, "Retention", "GENDURABLE_RETENTION", c.Retention, "must not be negative (0: the default, 168h)")
	v.Check(c.Interval >= 0, "Interval", "", c.Interval, "must not be negative (0: the default, 1m)")
	v.Check(c.Batch >= 0, "Batch", "", c.Batch, "must not be negative (0: the default, 1000)")
	return v.Err()
}

// NewGC returns a stopped collector; it panics when cfg.Validate refuses a setting.
func (e *Engine) NewGC(cfg GCConfig) *GC {
	mustBeValid(cfg.Validate())
	if cfg.Retention == 0 {
		cfg.Retention = 7 * 24 * time.Hour
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Minute
	}
	if cfg.Batch == 0 {
		cfg.Batch = 1000
	}
	return &GC{engine: e, cfg: cfg, log: e.log.With("service", "gc")}
}

// Sweep deletes one batch and returns how many jobs it deleted.
func (g *GC) Sweep(ctx context.Context) (int, error) {
	ids, err := g.engine.db.JobGCSelect(ctx, g.cfg.Retention, g.cfg.Batch)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	n, err := g.engine.db.JobGCDelete(ctx, ids)
	if g.engine.metrics != nil && n > 0 {
		g.engine.metrics.GCDeleted.Add(float64(n))
	}
	return n, err
}

// Start sweeps every Interval until Stop.
func (g *GC) Start(ctx context.Context) {
	g.start(ctx, g.cfg.Interval, func(ctx context.Context) bool {
		n, err := g.Sweep(ctx)
		if err != nil && ctx.Err() == nil {
			g.log.Error("gc sweep failed", "err", err)
		}
		if g.OnSweep != nil {
			g.OnSweep(n, err)
		}
		return err == nil && n >= g.cfg.Batch
	})
}
