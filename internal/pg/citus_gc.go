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
	// The remote children, whose parents are on other shards, up to limit of them: those
	// kept (a live parent) do not count against the others' batch, so that a shard of them
	// does not hold back the rest.
	var remote []dbcitus.JobGCSelectRow
	for shard := 0; shard < l.shardCount() && len(ids) < limit; shard++ {
		got, err := q.JobGCSelect(ctx, dbcitus.JobGCSelectParams{Placements: l.shardPlacements(shard),
			RetentionMs: retention.Milliseconds(), MaxRows: limit - len(ids)})
		if err != nil {
			return nil, translate(err)
		}
		for _, r := range got {
			switch {
			case r.RemoteParentID == 0:
				ids = append(ids, r.ID)
			case len(remote) < limit:
				remote = append(remote, r)
			}
		}
	}
	if len(remote) > 0 {
		collectable, err := db.citusGCRemoteChildren(ctx, q, l, remote)
		if err != nil {
			return nil, err
		}
		ids = append(ids, collectable...)
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

// citusGCRemoteChildren answers which of the remote children GC found past their retention
// it may delete, by their parents (JobGCParents, one statement on the parents' shards), as
// plain PostgreSQL keeps a child while its parent is live: those whose parent is gone, and
// those whose parent is finished and counted their ends (joined). A child whose end is still
// to be carried to a parent that exists waits for the carry.
func (db *DB) citusGCRemoteChildren(ctx context.Context, q *dbcitus.Queries, l *citusLayout, remote []dbcitus.JobGCSelectRow) ([]int64, error) {
	parents := make([]int64, len(remote))
	at := make([]int, len(remote))
	for i, r := range remote {
		parents[i], at[i] = r.RemoteParentID, l.PlacementOfID(r.RemoteParentID)
	}
	slices.Sort(at)
	found, err := q.JobGCParents(ctx, dbcitus.JobGCParentsParams{Placements: slices.Compact(at), Ids: parents})
	if err != nil {
		return nil, translate(err)
	}
	live := make(map[int64]bool, len(found))
	for _, p := range found {
		live[p.ID] = p.Live
	}
	var ids []int64
	for _, r := range remote {
		isLive, exists := live[r.RemoteParentID]
		if !exists || (!isLive && r.ParentJoin != nil && *r.ParentJoin == "joined") {
			ids = append(ids, r.ID)
		}
	}
	return ids, nil
}

// citusGCDelete is JobGCDelete on Citus: per shard of the ids, one transaction (the
// inboxes, the jobs, then the stubs of the parents deleted), then the jobs' idempotency
// keys and key holder rows wherever they live.
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
			// The stubs of the remote children of the parents it deleted (citus_family.go).
			if err := q.JobGCDeleteRemoteChildren(ctx, dbcitus.JobGCDeleteRemoteChildrenParams{Placements: placements, Ids: gone}); err != nil {
				return err
			}
			deleted = append(deleted, gone...) // (only once its transaction may commit)
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
