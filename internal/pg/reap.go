package pg

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Reaped is one step whose lease expired, and the status it was put in.
type Reaped struct {
	JobID  int64
	Status string
}

// JobReapExpiredLeases takes back up to limit leases expired at asOf (nil: the
// database's clock) (sql/reap.sql).
func (db *DB) JobReapExpiredLeases(ctx context.Context, limit int, asOf *time.Time) ([]Reaped, error) {
	return collect(ctx, db, stmt("JobReapExpiredLeases"), func(r pgx.Rows) (Reaped, error) {
		var x Reaped
		return x, r.Scan(&x.JobID, &x.Status)
	}, limit, asOf)
}

// JobWakeExpiredAwaits makes up to limit awaiting jobs past their deadline at asOf (nil:
// the database's clock) runnable and returns how many it woke.
func (db *DB) JobWakeExpiredAwaits(ctx context.Context, limit int, asOf *time.Time) (int, error) {
	ids, err := collect(ctx, db, stmt("JobWakeExpiredAwaits"), func(r pgx.Rows) (int64, error) {
		var id int64
		return id, r.Scan(&id)
	}, limit, asOf)
	return len(ids), err
}
