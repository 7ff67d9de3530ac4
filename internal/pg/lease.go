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
	ids, tokens := leaseArrays(leases)
	rows, err := db.q.LeaseExtendMany(ctx, dbsqlc.LeaseExtendManyParams{Ids: ids, Tokens: tokens, LeaseTtlMs: ttl.Milliseconds()})
	return convertAll(rows, func(r dbsqlc.LeaseExtendManyRow) LeaseExtended {
		return LeaseExtended{JobID: r.ID, ExpiresAt: *r.ExpiresAt} // the statement drops NULL expiries
	}), translate(err)
}

// LeaseReleaseMany gives claimed steps back unrun (runnable, attempt undone, gate slot
// returned) and returns the ids it released; a lease missing from the answer was lost.
func (db *DB) LeaseReleaseMany(ctx context.Context, leases []Lease) ([]int64, error) {
	ids, tokens := leaseArrays(leases)
	released, err := db.q.LeaseReleaseMany(ctx, dbsqlc.LeaseReleaseManyParams{Ids: ids, Tokens: tokens})
	return released, translate(err)
}
