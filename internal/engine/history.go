package engine

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
)

// HistoryConfig tunes the upkeep of the step history's partitions (migration 0011).
type HistoryConfig struct {
	// Partition is the span of finished_at one partition of steps covers (default 24h,
	// at least 1h: GENDURABLE_HISTORY_PARTITION). Partitions start on multiples of it
	// (UTC midnight for 24h); changing it applies from the end of the partitions made.
	Partition time.Duration
	// Ahead is how far past now partitions are made (default 3 partitions): the server
	// may be down that long before rows land in the DEFAULT partition.
	Ahead time.Duration
	// Retention is the age past which a partition goes, counted from the end of its range
	// (default 7 days: GENDURABLE_RETENTION). A partition is dropped only once no job it
	// holds steps of still exists, so a queue that keeps its jobs longer keeps their
	// history too; a queue that keeps them shorter leaves their steps until then.
	Retention time.Duration
	// Interval between passes (default 10 minutes).
	Interval time.Duration
	// LockTimeout bounds the wait for a lock of one change (default 500ms): at most that
	// long can outcome statements queue behind a partition drop. Past it the change is
	// left for the next pass.
	LockTimeout time.Duration
	// Now is the clock that decides which partitions should exist (default: the
	// database's now(), the clock that routes the rows). Tests pin it.
	Now func(context.Context) (time.Time, error)
}

// HistoryPass is what one pass of HistoryPartitions did.
type HistoryPass struct {
	// Made and Dropped name the partitions created and dropped; Kept those past
	// retention left because a job they hold steps of still exists.
	Made, Dropped, Kept []string
	// Moved counts the rows taken over from the DEFAULT partition.
	Moved int64
}

// HistoryPartitions keeps the partitions of steps: it makes them ahead of time, and
// drops whole partitions past retention instead of deleting rows (no dead tuples, no
// vacuum, almost no WAL). A pass is a catalog read and, once per partition, a DDL
// transaction. Safe to run in every process: the changes take an advisory lock.
type HistoryPartitions struct {
	engine *Engine
	cfg    HistoryConfig
	log    *slog.Logger
	// OnPass, when set, is called after each pass.
	OnPass func(HistoryPass, error)
	loop
}

// Validate reports the settings NewHistoryPartitions refuses.
func (c HistoryConfig) Validate() error {
	v := ConfigCheck{Service: "history"}
	v.Check(c.Partition == 0 || c.Partition >= time.Hour, "Partition", "GENDURABLE_HISTORY_PARTITION", c.Partition,
		"must span at least 1h (0: the default, 24h)")
	v.Check(c.Ahead >= 0, "Ahead", "", c.Ahead, "must not be negative (0: the default, 3 partitions)")
	v.Check(c.Retention >= 0, "Retention", "GENDURABLE_RETENTION", c.Retention, "must not be negative (0: the default, 168h)")
	v.Check(c.Interval >= 0, "Interval", "", c.Interval, "must not be negative (0: the default, 10m)")
	v.Check(c.LockTimeout >= 0, "LockTimeout", "", c.LockTimeout, "must not be negative (0: the default, 500ms)")
	return v.Err()
}

// NewHistoryPartitions returns a stopped service; an error when cfg.Validate refuses a
// setting.
func (e *Engine) NewHistoryPartitions(cfg HistoryConfig) (*HistoryPartitions, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Partition == 0 {
		cfg.Partition = 24 * time.Hour
	}
	if cfg.Ahead == 0 {
		cfg.Ahead = 3 * cfg.Partition
	}
	if cfg.Retention == 0 {
		cfg.Retention = 7 * 24 * time.Hour
	}
	if cfg.Interval == 0 {
		cfg.Interval = 10 * time.Minute
	}
	if cfg.LockTimeout == 0 {
		cfg.LockTimeout = 500 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = e.db.DatabaseNow
	}
	return &HistoryPartitions{engine: e, cfg: cfg, log: e.log.With("service", "history")}, nil
}

// Pass makes the partitions missing up to now + Ahead and drops those past retention.
// A change another session holds up (pg.ErrPartitionBusy) ends the pass without error.
func (h *HistoryPartitions) Pass(ctx context.Context) (HistoryPass, error) {
	var done HistoryPass
	now, err := h.cfg.Now(ctx)
	if err != nil {
		return done, err
	}
	parts, err := h.engine.db.StepPartitionList(ctx)
	if err != nil {
		return done, err
	}
	// Coverage goes on from the end of the last partition (filling a gap left while no
	// server ran, whose rows wait in the DEFAULT partition), or starts with now's.
	var covered time.Time
	for _, p := range parts {
		if !p.Default && p.To.After(covered) {
			covered = p.To
		}
	}
	from := now.UTC().Truncate(h.cfg.Partition)
	if !covered.IsZero() {
		from = covered
	}
	for horizon := now.Add(h.cfg.Ahead); from.Before(horizon); {
		to := from.Truncate(h.cfg.Partition).Add(h.cfg.Partition)
		moved, err := h.engine.db.StepPartitionCreate(ctx, from, to, h.cfg.LockTimeout)
		if err != nil {
			return done, h.busy(err)
		}
		done.Made = append(done.Made, pg.StepPartitionName(from))
		done.Moved += moved
		from = to
	}
	cutoff := now.Add(-h.cfg.Retention)
	for _, p := range parts {
		if p.Default || p.To.After(cutoff) {
			continue
		}
		dropped, err := h.engine.db.StepPartitionDrop(ctx, p.Name, h.cfg.LockTimeout)
		if err != nil {
			return done, h.busy(err)
		}
		if dropped {
			done.Dropped = append(done.Dropped, p.Name)
		} else {
			done.Kept = append(done.Kept, p.Name)
		}
	}
	return done, nil
}

// busy turns a change held up by another session into no error: the next pass retries.
func (h *HistoryPartitions) busy(err error) error {
	if errors.Is(err, pg.ErrPartitionBusy) {
		h.log.Info("history partition change left for the next pass", "err", err)
		return nil
	}
	return err
}

// Start runs a pass now and every Interval until Stop.
func (h *HistoryPartitions) Start(ctx context.Context) {
	h.start(ctx, h.cfg.Interval, func(ctx context.Context) bool {
		done, err := h.Pass(ctx)
		if err != nil && ctx.Err() == nil {
			h.log.Error("history partition pass failed", "err", err)
		}
		level := slog.LevelDebug // a pass that changed nothing (but may name kept partitions)
		if len(done.Made)+len(done.Dropped) > 0 || done.Moved > 0 {
			level = slog.LevelInfo
		}
		h.log.Log(ctx, level, "history partitions", "made", done.Made, "dropped", done.Dropped, "kept", done.Kept, "moved", done.Moved)
		if h.OnPass != nil {
			h.OnPass(done, err)
		}
		return false
	})
}
