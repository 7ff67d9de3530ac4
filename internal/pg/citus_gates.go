package pg

import (
	"context"

	"github.com/gendurable/gendurable/internal/pg/dbcitus"
	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
	"github.com/jackc/pgx/v5"
)

// Gates on Citus (sql/citus/gates.sql, docs/citus.md): a gated step holds a slot number,
// unique among its key's executing steps (jobs_gate_slot), so there are no counters to
// shape, give back or reconcile.

// citusGateList reads the gates (key nil: all), each with its free slots counted at its
// key's placement (a router statement per gate, sent together).
func (db *DB) citusGateList(ctx context.Context, key *string) ([]Gate, error) {
	rows, err := dbcitus.New(db.pool).GateRows(ctx, key)
	if err != nil || len(rows) == 0 {
		return nil, translate(err)
	}
	batch := &pgx.Batch{}
	for _, g := range rows {
		batch.Queue(dbcitus.GateHeld, PlacementOfKey(g.Key), g.Key)
	}
	results := db.pool.SendBatch(ctx, batch)
	defer func() { _ = results.Close() }()
	out := make([]Gate, len(rows))
	for i, g := range rows {
		var held int
		if err := results.QueryRow().Scan(&held); err != nil {
			return nil, translate(err)
		}
		out[i] = Gate{Key: g.Key, Limit: g.Limit, Shards: g.Shards, Available: max(g.Limit-held, 0),
			CreatedAt: g.CreatedAt, UpdatedAt: g.UpdatedAt}
	}
	return out, translate(results.Close())
}

// citusGateUpsert writes the gate (a reference table); its slots are its limit.
func (db *DB) citusGateUpsert(ctx context.Context, key string, limit, shards int) (Gate, error) {
	if _, err := db.q.GateUpsert(ctx, dbsqlc.GateUpsertParams{Key: key, GateLimit: limit, Shards: shards}); err != nil {
		return Gate{}, translate(err)
	}
	return db.GateGet(ctx, key)
}
