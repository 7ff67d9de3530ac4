package pg

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// JobGCSelect returns up to limit finished jobs past their retention.
func (db *DB) JobGCSelect(ctx context.Context, retention time.Duration, limit int) ([]int64, error) {
	return collect(ctx, db, stmt("JobGCSelect"), func(r pgx.Rows) (int64, error) {
		var id int64
		return id, r.Scan(&id)
	}, retention.Milliseconds(), limit)
}

// JobGCDelete deletes finished jobs by id with their steps and signals; it returns how
// many jobs it deleted.
func (db *DB) JobGCDelete(ctx context.Context, ids []int64) (int, error) {
	deleted, err := collect(ctx, db, stmt("JobGCDelete"), func(r pgx.Rows) (int64, error) {
		var id int64
		return id, r.Scan(&id)
	}, ids)
	return len(deleted), err
}
