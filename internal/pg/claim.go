package pg

import (
	"context"
	"encoding/json"
	"time"

	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
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
	// Trace is nil for a job without a trace context, else the job's eligible time in
	// unix microseconds, a space and its trace context (Job.TraceContext): the claim
	// answers both in one column that is NULL when the job has none.
	Trace *string

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
	// FairnessKey is the job's fairness key (set by JobClaimFair only).
	FairnessKey *string
}

// JobClaimBatch claims and leases up to p.Limit runnable steps of one queue in one
// statement (JobClaimBatch in sql/job_claim.sql).
func (db *DB) JobClaimBatch(ctx context.Context, p JobClaimParams) ([]ClaimedJob, error) {
	if db.citus != nil {
		claimed, _, err := db.citusClaim(ctx, p)
		return claimed, err
	}
	claimed, _, err := db.claim(ctx, dbsqlc.JobClaimBatch, p, claimBatchColumns)
	return claimed, err
}

// JobClaimPlain claims like JobClaimBatch but only the candidates that need no
// admission (no concurrency key, no rate limit); others counts the candidates it met and
// left runnable, which JobClaimBatch claims (JobClaimPlain in sql/job_claim.sql).
func (db *DB) JobClaimPlain(ctx context.Context, p JobClaimParams) (claimed []ClaimedJob, others int, err error) {
	if db.citus != nil {
		// others: the keyed steps it claimed (their queue needs admission, engine.Claim)
		return db.citusClaim(ctx, p)
	}
	return db.claim(ctx, dbsqlc.JobClaimPlain, p, claimPlainColumns)
}

// claim runs one of the two claim statements and reads its answer by hand (readClaimed).
func (db *DB) claim(ctx context.Context, sql string, p JobClaimParams, columns claimColumns) (claimed []ClaimedJob, others int, err error) {
	rows, err := db.pool.Query(ctx, sql, claimArgs(p)...)
	if err != nil {
		return nil, 0, translate(err)
	}
	return readClaimed(rows, p, columns)
}

// claimColumns says which of the claim statements' answers readClaimed reads.
type claimColumns int

const (
	claimBatchColumns claimColumns = iota // JobClaimBatch's
	claimPlainColumns                     // JobClaimPlain's: no gate_shard, then others
	claimFairColumns                      // JobClaimFair's: JobClaimBatch's, then fairness_key
)

// claimArgs are the claim statements' arguments, in their $n order.
func claimArgs(p JobClaimParams) []any {
	return []any{p.Queue, p.Limit, p.LeaseTTL.Milliseconds(), p.Owner, int64(p.SignalCap)}
}

// readClaimed reads a claim statement's answer by hand into the claimed steps, and
// closes rows: the columns of dbsqlc.JobClaimBatchRow, by position, where JobClaimPlain's
// answer has no gate_shard and ends with `others` (its row with id 0 carries only that).
// The generated methods append their rows to a growing slice, which were then copied
// again: 1.9 kB a claimed step between them. TestClaimReaderAgreesWithSqlc reads one
// answer both ways and compares them field by field.
func readClaimed(rows pgx.Rows, p JobClaimParams, columns claimColumns) (claimed []ClaimedJob, others int, err error) {
	defer rows.Close()
	var c ClaimedJob
	var n int64
	// The handler's columns repeat over the rows of its jobs: one string (and pointer)
	// for each distinct value instead of one a row.
	var texts [5][]*string
	var ints [4][]*int
	dest := []any{&c.ID, oneOf{&c.Queue, []string{p.Queue}}, seenText{&c.Handler, &texts[4]}, &c.Key, &c.Step,
		&c.Attempt, &c.MaxAttempts, &c.Input, &c.State, &c.CreatedAt, &c.LeaseToken, &c.LeaseExpiresAt,
		&c.ClaimedAt, &c.Wake, &c.ConsumedSeq, &c.ClaimInboxSeq, &c.InboxSeq, &c.PendingChildren, &c.GateShard, &c.Trace,
		seenTextPtr{&c.HandlerURL, &texts[0]}, seenTextPtr{&c.Secret, &texts[1]},
		seenTextPtr{&c.PreviousSecret, &texts[2]}, &c.PreviousSecretExpiresAt, seenIntPtr{&c.TimeoutMS, &ints[0]},
		seenIntPtr{&c.BackoffBaseMS, &ints[1]}, seenIntPtr{&c.BackoffMaxMS, &ints[2]},
		seenTextPtr{&c.BreakerState, &texts[3]}, seenIntPtr{&c.ConsecutiveFailures, &ints[3]},
		&c.BreakerNextProbeAt, &c.HandlerPausedAt, &n}
	switch columns {
	case claimPlainColumns:
		dest = append(dest[:18], dest[19:]...) // no gate_shard
	case claimFairColumns:
		dest[len(dest)-1] = &c.FairnessKey // no others, a fairness key
	default:
		dest = dest[:len(dest)-1] // no others
	}
	claimed = make([]ClaimedJob, 0, p.Limit)
	for rows.Next() {
		c = ClaimedJob{}
		if err := rows.Scan(dest...); err != nil {
			return nil, 0, translate(err)
		}
		if c.ID != 0 { // else the row of a plain claim that claimed nothing
			claimed = append(claimed, c)
		}
	}
	return claimed, int(n), translate(rows.Err())
}

// JobReadyExists reports whether queue has a due runnable job (one jobs_pick probe): an
// empty pick on such a queue was throttled, not idle.
func (db *DB) JobReadyExists(ctx context.Context, queue string) (bool, error) {
	if db.citus != nil {
		return db.citusReadyExists(ctx, queue)
	}
	ok, err := db.q.JobReadyExists(ctx, queue)
	return ok, translate(err)
}
