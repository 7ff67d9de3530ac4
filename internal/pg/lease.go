package pg

import (
	"context"
	"time"

	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
)

// Lease identifies one leased step.
type Lease struct {
	JobID int64
	Token string
}

// LeaseExtended is a lease that is still held, with its new expiry.
type LeaseExtended struct {
	JobID     int64
	ExpiresAt time.Time
}

func leaseArrays(leases []Lease) (ids []int64, tokens []string) {
	ids = make([]int64, len(leases))
	tokens = make([]string, len(leases))
	for i, l := range leases {
		ids[i], tokens[i] = l.JobID, l.Token
	}
	return ids, tokens
}

// LeaseExtendMany extends every lease still held by ttl from now, in one statement; a
// lease missing from the answer is lost.
func (db *DB) LeaseExtendMany(ctx context.Context, leases []Lease, ttl time.Duration) ([]LeaseExtended, error) {
	if db.citus != nil {
		return db.citusExtendLeases(ctx, leases, ttl)
	}
	ids, tokens := leaseArrays(leases)
	rows, err := db.q.LeaseExtendMany(ctx, dbsqlc.LeaseExtendManyParams{Ids: ids, Tokens: tokens, LeaseTtlMs: ttl.Milliseconds()})
	return convertAll(rows, func(r dbsqlc.LeaseExtendManyRow) LeaseExtended {
		return LeaseExtended{JobID: r.ID, ExpiresAt: *r.ExpiresAt} // the statement drops NULL expiries
	}), translate(err)
}

// LeaseReleaseMany gives claimed steps back unrun (runnable, attempt undone, gate slot
// returned) and returns the ids it released; a lease missing from the answer was lost.
func (db *DB) LeaseReleaseMany(ctx context.Context, leases []Lease) ([]int64, error) {
	if db.citus != nil {
		return db.citusReleaseLeases(ctx, leases)
	}
	ids, tokens := leaseArrays(leases)
	released, err := db.q.LeaseReleaseMany(ctx, dbsqlc.LeaseReleaseManyParams{Ids: ids, Tokens: tokens})
	return released, translate(err)
}

// LeaseBackoff is what a leased step's retry delay is computed from: its attempt and
// its handler's backoff settings (nil when no handler is registered under its name).
type LeaseBackoff struct {
	Lease
	Attempt       int
	BackoffBaseMS *int
	BackoffMaxMS  *int
}

// LeaseGetBackoffs reads the attempts and backoff settings of leased steps in one
// statement (sql/job_lease.sql); a lease missing from the answer is no longer held.
func (db *DB) LeaseGetBackoffs(ctx context.Context, leases []Lease) ([]LeaseBackoff, error) {
	if db.citus != nil {
		return db.citusGetBackoffs(ctx, leases)
	}
	ids, tokens := leaseArrays(leases)
	rows, err := db.q.LeaseGetBackoffs(ctx, dbsqlc.LeaseGetBackoffsParams{Ids: ids, Tokens: tokens})
	return convertAll(rows, func(r dbsqlc.LeaseGetBackoffsRow) LeaseBackoff {
		return LeaseBackoff{Lease: Lease{JobID: r.ID, Token: r.LeaseToken}, Attempt: r.Attempt, BackoffBaseMS: r.BackoffBaseMs, BackoffMaxMS: r.BackoffMaxMs}
	}), translate(err)
}
