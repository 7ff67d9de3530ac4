package pg

import (
	"context"
	"slices"
	"time"

	"github.com/gendurable/gendurable/internal/pg/dbcitus"
	"github.com/jackc/pgx/v5"
)

// GC on Citus (sql/citus/gc.sql): the shards in turn, each a router statement, and the
// idempotency keys on every shard at once.

// citusGCSelect is JobGCSelect on Citus: up to limit jobs past their retention, taken
// shard after shard, less those an unexpired idempotency key points to.
func (db *DB) citusGCSelect(ctx context.Context, retention time.Duration, limit int) ([]int64, error) {
	l, err := db.layout(ctx)
	if err != nil {
		return nil, err
	}
	q := dbcitus.New(db.pool)
	var ids []int64
	for shard := 0; shard < l.shardCount() && len(ids) < limit; shard++ {
		got, err := q.JobGCSelect(ctx, dbcitus.JobGCSelectParams{Placements: l.shardPlacements(shard),
			RetentionMs: retention.Milliseconds(), MaxRows: limit - len(ids)})
		if err != nil {
			return nil, translate(err)
		}
		ids = append(ids, got...)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	held, err := q.JobGCIdempotencyHeld(ctx, ids)
	if err != nil {
		return nil, translate(err)
	}
	return slices.DeleteFunc(ids, func(id int64) bool { return slices.Contains(held, id) }), nil
}

// citusGCDelete is JobGCDelete on Citus: per shard of the ids, one transaction (the
// inboxes, the jobs, then the stubs of the parents deleted and the release of their remote
// children, which GC then deletes on their own shards), then the jobs' idempotency keys and
// key holder rows wherever they live.
func (db *DB) citusGCDelete(ctx context.Context, ids []int64) (int, error) {
	groups, l, err := db.citusByShard(ctx, len(ids), func(i int) int64 { return ids[i] })
	if err != nil {
		return 0, err
	}
	var deleted []int64
	for _, g := range groups {
		part := make([]int64, len(g))
		for k, i := range g {
			part[k] = ids[i]
		}
		placements := l.shardPlacements(l.shardIndex(l.PlacementOfID(part[0])))
		err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
			q := dbcitus.New(tx)
			if err := q.JobGCDeleteSignals(ctx, dbcitus.JobGCDeleteSignalsParams{Placements: placements, Ids: part}); err != nil {
				return err
			}
			gone, err := q.JobGCDeleteJobs(ctx, dbcitus.JobGCDeleteJobsParams{Placements: placements, Ids: part})
			if err != nil {
				return err
			}
			// The stubs of the remote children of the parents it deleted, and the children
			// released where they live (citus_family.go), in the same transaction.
			children, err := q.JobGCDeleteRemoteChildren(ctx, dbcitus.JobGCDeleteRemoteChildrenParams{Placements: placements, Ids: gone})
			if err != nil {
				return err
			}
			if len(children) > 0 {
				at := make([]int, len(children))
				for i, id := range children {
					at[i] = l.PlacementOfID(id)
				}
				slices.Sort(at)
				if err := q.RemoteChildrenRelease(ctx, dbcitus.RemoteChildrenReleaseParams{Placements: slices.Compact(at), Ids: children}); err != nil {
					return err
				}
			}
			deleted = append(deleted, gone...)
			return nil
		})
		if err != nil {
			return len(deleted), translate(err)
		}
	}
	if len(deleted) > 0 {
		q := dbcitus.New(db.pool)
		if err := q.JobGCDeleteIdempotencyKeys(ctx, deleted); err != nil {
			return len(deleted), translate(err)
		}
		if err := q.JobGCDeleteKeyHolders(ctx, deleted); err != nil {
			return len(deleted), translate(err)
		}
		if err := q.JobGCDeleteDebounceHolders(ctx, deleted); err != nil {
			return len(deleted), translate(err)
		}
	}
	return len(deleted), nil
}
