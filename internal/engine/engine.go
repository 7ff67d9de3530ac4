// Package engine is gendurable's state machine: it validates what clients ask for,
// claims runnable steps, turns a step's answer into the job's next state (one statement
// in internal/pg), and runs the maintenance services (reaper). It decides; internal/pg
// writes; internal/dispatch talks to webhooks; internal/httpapi talks to clients.
package engine

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
)

// The errors every caller matches with errors.Is (defined by pg, where driver errors
// are translated, and re-exported here for the layers above).
var (
	ErrNotFound  = pg.ErrNotFound
	ErrConflict  = pg.ErrConflict
	ErrLeaseLost = pg.ErrLeaseLost
	ErrInvalid   = pg.ErrInvalid
	ErrRetryable = pg.ErrRetryable
)

// Config holds the engine's settings.
type Config struct {
	// LeaseTTL is how long a claimed step is leased before it must be heartbeated
	// (default 30s; heartbeats run every third of it).
	LeaseTTL time.Duration
	// SignalCap is the most signals one step request shows (default 100).
	SignalCap int
	// ChildrenCap is the most children one step request shows (default 1000).
	ChildrenCap int
	// Owner names this process in lease_owner (default host:pid).
	Owner string
	// IdempotencyWindow is how long an Idempotency-Key answers the job it made, also
	// after that job finished (default 24h; GC keeps the job meanwhile).
	IdempotencyWindow time.Duration
	// IdempotencyClock, when set, is the time idempotency keys are judged by and debounce
	// periods count from (default: the database's now()). Tests set it to pass a window
	// or a period without waiting.
	IdempotencyClock func() time.Time
	// StepBodyCap is the most bytes of each request and response body a history row keeps
	// (default DefaultStepBodyCap, 8 KiB: GENDURABLE_STEP_BODY_CAP); a longer one is kept
	// cut to it and marked truncated. Which attempts keep them is the queue's step_bodies.
	StepBodyCap int
}

// Validate reports the settings New refuses, each named with its environment variable.
func (c Config) Validate() error {
	v := ConfigCheck{Service: "engine"}
	v.Check(c.LeaseTTL == 0 || c.LeaseTTL >= 100*time.Millisecond, "LeaseTTL", "GENDURABLE_LEASE_TTL", c.LeaseTTL,
		"must be at least 100ms (0: the default, 30s)")
	v.Check(c.SignalCap >= 0, "SignalCap", "", c.SignalCap, "must not be negative (0: the default, 100)")
	v.Check(c.ChildrenCap >= 0, "ChildrenCap", "", c.ChildrenCap, "must not be negative (0: the default, 1000)")
	v.Check(c.IdempotencyWindow == 0 || c.IdempotencyWindow >= time.Second, "IdempotencyWindow",
		"GENDURABLE_IDEMPOTENCY_WINDOW", c.IdempotencyWindow, "must be at least 1s (0: the default, 24h)")
	v.Check(c.StepBodyCap >= 0, "StepBodyCap", "GENDURABLE_STEP_BODY_CAP", c.StepBodyCap,
		"must not be negative (0: the default, 8 KiB)")
	return v.Err()
}

func (c *Config) applyDefaults() {
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 30 * time.Second
	}
	if c.SignalCap == 0 {
		c.SignalCap = 100
	}
	if c.ChildrenCap == 0 {
		c.ChildrenCap = 1000
	}
	if c.IdempotencyWindow == 0 {
		c.IdempotencyWindow = pg.DefaultIdempotencyWindow
	}
	if c.StepBodyCap == 0 {
		c.StepBodyCap = DefaultStepBodyCap
	}
	if c.Owner == "" {
		c.Owner = defaultOwner()
	}
}

// Engine applies gendurable's state changes to one database.
type Engine struct {
	db  *pg.DB
	cfg Config
	log *slog.Logger
	// reaperTurnOwner names this process when its reaper asks for the turn: Owner when
	// it was set, else host:pid.
	reaperTurnOwner string
	metrics         *Metrics
	// knownQueues holds the queue names this process has seen exist (string → struct{}),
	// so a spawn into a queue nothing has created yet costs one statement the first time.
	knownQueues sync.Map
	// rollups counts the attempts written to the history for the charts (nil until
	// NewStepRollups).
	rollups atomic.Pointer[StepRollups]
	// admissionUntil holds, per queue (string → time.Time), until when its claims go by
	// JobClaimBatch, which admits rows with a concurrency key or a rate limit: set when a
	// plain claim (JobClaimPlain) met such rows. Absent or past: plain claims.
	admissionUntil sync.Map
	// localClaims, when set (SetLocalClaims), says whether this process's dispatcher
	// claims at once rows new jobs of a queue.
	localClaims atomic.Pointer[func(queue string, rows int) bool]
}

// SetLocalClaims tells the engine whether this process's dispatcher would claim at once
// rows new jobs of a queue (nil: it would not; no dispatcher runs). An insert it answers
// yes for names this process in its NOTIFY, and the other processes' dispatchers let
// that notice pass (pg.WorkNotice).
func (e *Engine) SetLocalClaims(fn func(queue string, rows int) bool) {
	if fn == nil {
		e.localClaims.Store(nil)
		return
	}
	e.localClaims.Store(&fn)
}

// claimerOf is the claimer an insert of counts (rows by queue) names in its NOTIFY: this
// process when its dispatcher claims all of them at once, else none.
func (e *Engine) claimerOf(counts map[string]int) string {
	fn := e.localClaims.Load()
	if fn == nil || len(counts) == 0 {
		return ""
	}
	for queue, n := range counts {
		if !(*fn)(queue, n) {
			return ""
		}
	}
	return e.cfg.Owner
}

// SetMetrics makes the engine and its services record into m.
func (e *Engine) SetMetrics(m *Metrics) { e.metrics = m }

// New returns an engine over db; an error when cfg.Validate refuses a setting.
func New(db *pg.DB, cfg Config, log *slog.Logger) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// The reaper's turn (pg.DB.ReaperTurn) is the process's: the engines of one process
	// (tests, the bench) share it, unless their owners are named.
	turnOwner := cmp.Or(cfg.Owner, processName())
	cfg.applyDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Engine{db: db, cfg: cfg, log: log, reaperTurnOwner: turnOwner}, nil
}

// Config returns the engine's effective settings.
func (e *Engine) Config() Config { return e.cfg }

// PendingMigrations reports how many migrations of this build the database lacks (the
// server is ready at zero); an error when the database does not answer.
func (e *Engine) PendingMigrations(ctx context.Context) (int, error) {
	return e.db.MigrationsPending(ctx)
}

// ReplanIfGrown reopens the database connections when the jobs table has grown several
// times over since their statements were planned (pg.DB.ReplanIfGrown); it reports
// whether it did, and the table's size in pages.
func (e *Engine) ReplanIfGrown(ctx context.Context) (bool, int64, error) {
	return e.db.ReplanIfGrown(ctx)
}
