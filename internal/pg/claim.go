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
	rows, err := db.q.JobClaimPlain(ctx, dbsqlc.JobClaimPlainParams{Queue: p.Queue, MaxRows: p.Limit,
		LeaseTtlMs: p.LeaseTTL.Milliseconds(), LeaseOwner: p.Owner, SignalCap: int64(p.SignalCap)})
	if err != nil {
		return nil, 0, translate(err)
	}
	claimed = make([]ClaimedJob, 0, len(rows))
	for _, r := range rows {
		others = int(r.Others)
		if r.ID == 0 {
			continue // the row of a claim that claimed nothing
		}
		claimed = append(claimed, ClaimedJob{ID: r.ID, Queue: r.Queue, Handler: r.Handler, Key: r.Key, Step: r.Step,
			Attempt: r.Attempt, MaxAttempts: r.MaxAttempts, Input: r.Input, State: r.State, CreatedAt: r.CreatedAt,
			LeaseToken: r.LeaseToken, LeaseExpiresAt: r.LeaseExpiresAt, ClaimedAt: r.AttemptedAt, Wake: r.Wake,
			ConsumedSeq: r.ConsumedSeq, ClaimInboxSeq: r.ClaimInboxSeq, InboxSeq: r.InboxSeq,
			PendingChildren: r.PendingChildren,
			HandlerURL:      r.Url, Secret: r.Secret, PreviousSecret: r.PreviousSecret,
			PreviousSecretExpiresAt: r.PreviousSecretExpiresAt, TimeoutMS: r.TimeoutMs,
			BackoffBaseMS: r.BackoffBaseMs, BackoffMaxMS: r.BackoffMaxMs,
			BreakerState: r.BreakerState, ConsecutiveFailures: r.ConsecutiveFailures,
			BreakerNextProbeAt: r.BreakerNextProbeAt, HandlerPausedAt: r.PausedAt})
	}
	return claimed, others, nil
}

// JobReadyExists reports whether queue has a due runnable job (one jobs_pick probe): an
// empty pick on such a queue was throttled, not idle.
func (db *DB) JobReadyExists(ctx context.Context, queue string) (bool, error) {
	ok, err := db.q.JobReadyExists(ctx, queue)
	return ok, translate(err)
}
