package pg

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
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

// LeaseExtendMany extends every lease still held by ttl from now, in one statement; a
// lease missing from the answer is lost.
func (db *DB) LeaseExtendMany(ctx context.Context, leases []Lease, ttl time.Duration) ([]LeaseExtended, error) {
	ids := make([]int64, len(leases))
	tokens := make([]string, len(leases))
	for i, l := range leases {
		ids[i], tokens[i] = l.JobID, l.Token
	}
	return collect(ctx, db, stmt("LeaseExtendMany"), func(r pgx.Rows) (LeaseExtended, error) {
		var e LeaseExtended
		return e, r.Scan(&e.JobID, &e.ExpiresAt)
	}, ids, tokens, ttl.Milliseconds())
}

// LeaseReleaseMany gives claimed steps back unrun (runnable, attempt undone, gate slot
// returned) and returns the ids it released; a lease missing from the answer was lost.
func (db *DB) LeaseReleaseMany(ctx context.Context, leases []Lease) ([]int64, error) {
	ids := make([]int64, len(leases))
	tokens := make([]string, len(leases))
	for i, l := range leases {
		ids[i], tokens[i] = l.JobID, l.Token
	}
	return collect(ctx, db, stmt("LeaseReleaseMany"), func(r pgx.Rows) (int64, error) {
		var id int64
		return id, r.Scan(&id)
	}, ids, tokens)
}
