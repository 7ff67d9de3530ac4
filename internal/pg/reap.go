package pg

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Reaped is one step whose lease expired, and the status it was put in.
type Reaped struct {
	JobID  int64
	Status string
}

// JobReapExpiredLeases takes back up to limit expired leases (sql/reap.sql).
func (db *DB) JobReapExpiredLeases(ctx context.Context, limit int) ([]Reaped, error) {
	return collect(ctx, db, stmt("JobReapExpiredLeases"), func(r pgx.Rows) (Reaped, error) {
		var x Reaped
		return x, r.Scan(&x.JobID, &x.Status)
	}, limit)
}

// JobWakeExpiredAwaits makes up to limit awaiting jobs past their deadline runnable and
// returns how many it woke.
func (db *DB) JobWakeExpiredAwaits(ctx context.Context, limit int) (int, error) {
	ids, err := collect(ctx, db, stmt("JobWakeExpiredAwaits"), func(r pgx.Rows) (int64, error) {
		var id int64
		return id, r.Scan(&id)
	}, limit)
	return len(ids), err
}
