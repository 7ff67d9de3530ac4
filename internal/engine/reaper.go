package engine

import (
	"context"
	"log/slog"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
)

// ReaperConfig tunes the Reaper.
type ReaperConfig struct {
	// Interval between sweeps (default 1s).
	Interval time.Duration
	// Batch is the most rows one statement takes back (default 1000); a full batch is
	// followed at once by another sweep.
	Batch int
	// Now, when set, is the time a sweep judges leases and deadlines by (default: the
	// database's now()). Tests set it ahead to expire leases without waiting for them.
	Now func() time.Time
}

// ReaperStats counts what one sweep did.
type ReaperStats struct {
	Reaped      int // expired leases taken back
	AwaitsWoken int // awaits past their deadline made runnable
	// RemoteChildren counts what was carried between a family's shards on Citus: a remote
	// child's end or revival to its parent, a cancel to the child (pg.DB.RemoteChildrenSweep).
	RemoteChildren int
	Passed         bool // another process's reaper has the turn (Citus: pg.DB.ReaperTurn)
}

// Reaper takes back steps whose lease expired (their process died or hung) and wakes
// awaits whose deadline passed. Several reapers (one per server process) share the work
// safely: every sweep is ordered and SKIP LOCKED, and its cost is proportional to the
// rows it finds, not to the table. On Citus, where a sweep starts with fan-outs to every
// shard, one process sweeps at a time (pg.DB.ReaperTurn; the engines of one process share
// its turn, unless their owners are named): the turn is held for three intervals from
// each sweep, so a process that dies hands it on within three intervals.
type Reaper struct {
	engine *Engine
	cfg    ReaperConfig
	log    *slog.Logger
	// OnSweep, when set, is called after each sweep (tests wait on it; metrics count).
	OnSweep func(ReaperStats, error)
	loop
}

// Validate reports the settings NewReaper refuses.
func (c ReaperConfig) Validate() error {
	v := ConfigCheck{Service: "reaper"}
	v.Check(c.Interval >= 0, "Interval", "", c.Interval, "must not be negative (0: the default, 1s)")
	v.Check(c.Batch >= 0, "Batch", "", c.Batch, "must not be negative (0: the default, 1000)")
	return v.Err()
}

// NewReaper returns a stopped reaper; it panics when cfg.Validate refuses a setting.
func (e *Engine) NewReaper(cfg ReaperConfig) *Reaper {
	mustBeValid(cfg.Validate())
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	if cfg.Batch == 0 {
		cfg.Batch = 1000
	}
	return &Reaper{engine: e, cfg: cfg, log: e.log.With("service", "reaper")}
}

// Sweep runs one pass: expired leases, then expired awaits, each batch-bounded; or none,
// when another process's reaper has the turn (Passed).
func (r *Reaper) Sweep(ctx context.Context) (ReaperStats, error) {
	var st ReaperStats
	turn, err := r.engine.db.ReaperTurn(ctx, r.engine.reaperTurnOwner, 3*r.cfg.Interval)
	if err != nil {
		return st, err
	}
	if !turn {
		st.Passed = true
		return st, nil
	}
	var asOf *time.Time
	if r.cfg.Now != nil {
		asOf = ptr(r.cfg.Now())
	}
	reaped, err := r.reapExpiredLeases(ctx, asOf)
	if err != nil {
		return st, err
	}
	st.Reaped = len(reaped)
	for _, x := range reaped {
		r.log.Warn("lease expired; step taken back", "job_id", x.JobID, "status", x.Status)
		if r.engine.metrics != nil {
			r.engine.metrics.Reaped.WithLabelValues(x.Status).Inc()
		}
	}
	st.AwaitsWoken, err = r.engine.db.JobWakeExpiredAwaits(ctx, r.cfg.Batch, asOf)
	if r.engine.metrics != nil {
		r.engine.metrics.AwaitTimeouts.Add(float64(st.AwaitsWoken))
	}
	if err != nil {
		return st, err
	}
	st.RemoteChildren, err = r.engine.db.RemoteChildrenSweep(ctx, r.cfg.Batch)
	return st, err
}

// reapExpiredLeases takes back up to a batch of expired leases as River's rescuer does:
// one statement lists them with their attempts and handlers' backoff settings, the retry
// policy (RetryDelay) draws each one's delay here, and a second statement, fenced by
// token and expiry, takes them back with those delays. Nothing expired costs one
// statement.
func (r *Reaper) reapExpiredLeases(ctx context.Context, asOf *time.Time) ([]pg.Reaped, error) {
	expired, err := r.engine.db.JobListExpiredLeases(ctx, r.cfg.Batch, asOf)
	if err != nil || len(expired) == 0 {
		return nil, err
	}
	reaps := make([]pg.LeaseReap, len(expired))
	for i, x := range expired {
		reaps[i] = pg.LeaseReap{Lease: x.Lease, Delay: backoffOf(x.Attempt, x.BackoffBaseMS, x.BackoffMaxMS).Delay()}
	}
	reaped, err := r.engine.db.JobReapExpiredLeases(ctx, reaps, asOf)
	if rollups := r.engine.rollups.Load(); rollups != nil && len(reaped) > 0 {
		rollups.countReaped(reaped)
	}
	return reaped, err
}

// Start runs sweeps every Interval until Stop.
func (r *Reaper) Start(ctx context.Context) {
	r.start(ctx, r.cfg.Interval, func(ctx context.Context) bool {
		st, err := r.Sweep(ctx)
		if err != nil && ctx.Err() == nil {
			r.log.Error("reaper sweep failed", "err", err)
		}
		if r.OnSweep != nil {
			r.OnSweep(st, err)
		}
		return err == nil && (st.Reaped == r.cfg.Batch || st.AwaitsWoken == r.cfg.Batch || st.RemoteChildren >= r.cfg.Batch)
	})
}
