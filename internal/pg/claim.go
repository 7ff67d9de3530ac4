package pg

import (
	"context"
	"encoding/json"
	"time"

	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
)

// JobClaimParams says what one pick claims.
type JobClaimParams struct {
	Queue string
	// Limit is the most rows to claim (the batch).
	Limit int
	// LeaseTTL is how long the claimed steps are leased for before heartbeats.
	LeaseTTL time.Duration
	// Owner names the claiming process in lease_owner (host:pid).
	Owner string
	// SignalCap is the most signals one step is shown (the rest wait for the next step).
	SignalCap int
}

// ClaimedJob is one leased step with everything its webhook call needs.
type ClaimedJob struct {
	ID              int64
	Queue           string
	Handler         string
	Key             *string
	Step            int
	Attempt         int
	MaxAttempts     int
	Input           json.RawMessage
	State           json.RawMessage
	CreatedAt       time.Time
	LeaseToken      string
	LeaseExpiresAt  time.Time
	ClaimedAt       time.Time
	Wake            *string
	ConsumedSeq     int64
	ClaimInboxSeq   int64
	InboxSeq        int64
	PendingChildren int
	// GateShard is the gate slot shard the step holds (nil when not gated).
	GateShard *int

	// The handler's settings; HandlerURL is nil when the handler is not registered.
	HandlerURL              *string
	Secret                  *string
	PreviousSecret          *string
	PreviousSecretExpiresAt *time.Time
	TimeoutMS               *int
	BackoffBaseMS           *int
	BackoffMaxMS            *int
	// The handler's circuit breaker as the claim saw it (nil when not registered).
	BreakerState        *string
	ConsecutiveFailures *int
	BreakerNextProbeAt  *time.Time
	HandlerPausedAt     *time.Time
}

// JobClaimBatch claims and leases up to p.Limit runnable steps of one queue in one
// statement (JobClaimBatch in sql/job_claim.sql).
func (db *DB) JobClaimBatch(ctx context.Context, p JobClaimParams) ([]ClaimedJob, error) {
	rows, err := db.q.JobClaimBatch(ctx, dbsqlc.JobClaimBatchParams{Queue: p.Queue, MaxRows: p.Limit,
		LeaseTtlMs: p.LeaseTTL.Milliseconds(), LeaseOwner: p.Owner, SignalCap: int64(p.SignalCap)})
	return convertAll(rows, func(r dbsqlc.JobClaimBatchRow) ClaimedJob {
		return ClaimedJob{ID: r.ID, Queue: r.Queue, Handler: r.Handler, Key: r.Key, Step: r.Step, Attempt: r.Attempt,
			MaxAttempts: r.MaxAttempts, Input: r.Input, State: r.State, CreatedAt: r.CreatedAt, LeaseToken: r.LeaseToken,
			LeaseExpiresAt: r.LeaseExpiresAt, ClaimedAt: r.AttemptedAt, Wake: r.Wake, ConsumedSeq: r.ConsumedSeq,
			ClaimInboxSeq: r.ClaimInboxSeq, InboxSeq: r.InboxSeq, PendingChildren: r.PendingChildren, GateShard: r.GateShard,
			HandlerURL: r.Url, Secret: r.Secret, PreviousSecret: r.PreviousSecret,
			PreviousSecretExpiresAt: r.PreviousSecretExpiresAt, TimeoutMS: r.TimeoutMs,
			BackoffBaseMS: r.BackoffBaseMs, BackoffMaxMS: r.BackoffMaxMs,
			BreakerState: r.BreakerState, ConsecutiveFailures: r.ConsecutiveFailures,
			BreakerNextProbeAt: r.BreakerNextProbeAt, HandlerPausedAt: r.PausedAt}
	}), translate(err)
}

// JobClaimPlain claims like JobClaimBatch but only the candidates that need no
// admission (no concurrency key, no rate limit); others counts the candidates it met and
// left runnable, which JobClaimBatch claims (JobClaimPlain in sql/job_claim.sql).
func (db *DB) JobClaimPlain(ctx context.Context, p JobClaimParams) (claimed []ClaimedJob, others int, err error) {
	// Read by hand into the answer (the columns of dbsqlc.JobClaimPlainRow, in order):
	// the generated method grows a slice of rows by appending and this one copied them,
	// 1.9 kB a claimed step between them.
	rows, err := db.pool.Query(ctx, dbsqlc.JobClaimPlain, p.Queue, p.Limit, p.LeaseTTL.Milliseconds(), p.Owner, int64(p.SignalCap))
	if err != nil {
		return nil, 0, translate(err)
	}
	defer rows.Close()
	claimed = make([]ClaimedJob, 0, p.Limit)
	queue := []string{p.Queue}
	var n int64
	for rows.Next() {
		claimed = append(claimed, ClaimedJob{})
		c := &claimed[len(claimed)-1]
		if err := rows.Scan(&c.ID, oneOf{&c.Queue, queue}, &c.Handler, &c.Key, &c.Step, &c.Attempt, &c.MaxAttempts,
			&c.Input, &c.State, &c.CreatedAt, &c.LeaseToken, &c.LeaseExpiresAt, &c.ClaimedAt, &c.Wake,
			&c.ConsumedSeq, &c.ClaimInboxSeq, &c.InboxSeq, &c.PendingChildren,
			&c.HandlerURL, &c.Secret, &c.PreviousSecret, &c.PreviousSecretExpiresAt, &c.TimeoutMS,
			&c.BackoffBaseMS, &c.BackoffMaxMS,
			&c.BreakerState, &c.ConsecutiveFailures, &c.BreakerNextProbeAt, &c.HandlerPausedAt, &n); err != nil {
			return nil, 0, translate(err)
		}
		others = int(n)
		if c.ID == 0 {
			claimed = claimed[:len(claimed)-1] // the row of a claim that claimed nothing
		}
	}
	return claimed, others, translate(rows.Err())
}

// JobReadyExists reports whether queue has a due runnable job (one jobs_pick probe): an
// empty pick on such a queue was throttled, not idle.
func (db *DB) JobReadyExists(ctx context.Context, queue string) (bool, error) {
	ok, err := db.q.JobReadyExists(ctx, queue)
	return ok, translate(err)
}
