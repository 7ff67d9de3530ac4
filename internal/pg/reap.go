package pg

import (
	"context"
	"time"

	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
)

// Reaped is one step whose lease expired, and the status it was put in.
type Reaped struct {
	JobID  int64
	Status string
}

// JobReapExpiredLeases takes back up to limit leases expired at asOf (nil: the
// database's clock) (sql/job_lease.sql).
func (db *DB) JobReapExpiredLeases(ctx context.Context, limit int, asOf *time.Time) ([]Reaped, error) {
	rows, err := db.q.JobReapExpiredLeases(ctx, dbsqlc.JobReapExpiredLeasesParams{MaxRows: limit, AsOf: asOf})
	return convertAll(rows, func(r dbsqlc.JobReapExpiredLeasesRow) Reaped { return Reaped{JobID: r.ID, Status: r.Status} }), translate(err)
}

// JobWakeExpiredAwaits makes up to limit awaiting jobs past their deadline at asOf (nil:
// the database's clock) runnable and returns how many it woke.
func (db *DB) JobWakeExpiredAwaits(ctx context.Context, limit int, asOf *time.Time) (int, error) {
	ids, err := db.q.JobWakeExpiredAwaits(ctx, dbsqlc.JobWakeExpiredAwaitsParams{MaxRows: limit, AsOf: asOf})
	return len(ids), translate(err)
}
