package pg

import (
	"context"
	"time"

	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
)

// JobGCSelect returns up to limit finished jobs past their retention.
func (db *DB) JobGCSelect(ctx context.Context, retention time.Duration, limit int) ([]int64, error) {
	if db.citus != nil {
		return db.citusGCSelect(ctx, retention, limit)
	}
	ids, err := db.q.JobGCSelect(ctx, dbsqlc.JobGCSelectParams{RetentionMs: retention.Milliseconds(), MaxRows: limit})
	return ids, translate(err)
}

// JobGCDelete deletes finished jobs by id with their signals and idempotency keys; it
// returns how many jobs it deleted. Their steps go with their partition (StepPartitionDrop).
func (db *DB) JobGCDelete(ctx context.Context, ids []int64) (int, error) {
	if db.citus != nil {
		return db.citusGCDelete(ctx, ids)
	}
	deleted, err := db.q.JobGCDelete(ctx, ids)
	return len(deleted), translate(err)
}
