package pg

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
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
}

// JobClaimBatch claims and leases up to p.Limit runnable steps of one queue in one
// statement (JobClaimBatch in sql/pick.sql).
func (db *DB) JobClaimBatch(ctx context.Context, p JobClaimParams) ([]ClaimedJob, error) {
	return collect(ctx, db, stmt("JobClaimBatch"), func(r pgx.Rows) (ClaimedJob, error) {
		var c ClaimedJob
		err := r.Scan(&c.ID, &c.Queue, &c.Handler, &c.Key, &c.Step, &c.Attempt, &c.MaxAttempts, &c.Input,
			&c.State, &c.CreatedAt, &c.LeaseToken, &c.LeaseExpiresAt, &c.ClaimedAt, &c.Wake,
			&c.ConsumedSeq, &c.ClaimInboxSeq, &c.InboxSeq, &c.PendingChildren, &c.GateShard,
			&c.HandlerURL, &c.Secret, &c.PreviousSecret, &c.PreviousSecretExpiresAt, &c.TimeoutMS,
			&c.BackoffBaseMS, &c.BackoffMaxMS)
		return c, err
	}, p.Queue, p.Limit, p.LeaseTTL.Milliseconds(), p.Owner, p.SignalCap)
}

// JobReadyExists reports whether queue has a due runnable job (one jobs_pick probe): an
// empty pick on such a queue was throttled, not idle.
func (db *DB) JobReadyExists(ctx context.Context, queue string) (bool, error) {
	var ok bool
	err := db.pool.QueryRow(ctx, stmt("JobReadyExists"), queue).Scan(&ok)
	return ok, translate(err)
}
