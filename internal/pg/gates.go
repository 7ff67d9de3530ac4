package pg

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Gate is a concurrency gate: at most Limit executing jobs of its key.
type Gate struct {
	Key                  string
	Limit                int
	Shards               int
	Available            int
	CreatedAt, UpdatedAt time.Time
}

// SlotRepair is one slot counter the reconciler changed.
type SlotRepair struct {
	Key       string
	Shard     int
	Available int
}

// GateUpsert creates or changes a gate and reshapes its slot counters, recounted from
// the executing jobs, in one transaction that holds the gate's slot locks.
func (db *DB) GateUpsert(ctx context.Context, key string, limit, shards int) (Gate, error) {
	err := db.inTx(ctx, func(tx pgx.Tx) error {
		var g Gate
		if err := tx.QueryRow(ctx, stmt("GateUpsert"), key, limit, shards).Scan(&g.Key, &g.Limit, &g.Shards, &g.CreatedAt, &g.UpdatedAt); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, stmt("GateSlotsLock"), key); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, stmt("GateSlotsShape"), key, limit, shards); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, stmt("GateSlotsReconcile"), key)
		return err
	})
	if err != nil {
		return Gate{}, err
	}
	return db.GateGet(ctx, key)
}

// GateSlotsReconcile repairs every gate's slot counters from the executing jobs and
// returns the counters it changed: lock (in the pick's order), then recount with a fresh
// snapshot, so no admission that committed meanwhile is missed.
func (db *DB) GateSlotsReconcile(ctx context.Context) ([]SlotRepair, error) {
	var repaired []SlotRepair
	err := db.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, stmt("GateSlotsLock"), nil); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, stmt("GateSlotsReconcile"), nil)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r SlotRepair
			if err := rows.Scan(&r.Key, &r.Shard, &r.Available); err != nil {
				return err
			}
			repaired = append(repaired, r)
		}
		return rows.Err()
	})
	return repaired, err
}

func scanGate(r pgx.Rows) (Gate, error) {
	var g Gate
	return g, r.Scan(&g.Key, &g.Limit, &g.Shards, &g.Available, &g.CreatedAt, &g.UpdatedAt)
}

// GateGet returns one gate.
func (db *DB) GateGet(ctx context.Context, key string) (Gate, error) {
	gs, err := collect(ctx, db, stmt("GateList"), scanGate, &key)
	if err != nil {
		return Gate{}, err
	}
	if len(gs) == 0 {
		return Gate{}, ErrNotFound
	}
	return gs[0], nil
}

// GateList returns every gate.
func (db *DB) GateList(ctx context.Context) ([]Gate, error) {
	return collect(ctx, db, stmt("GateList"), scanGate, nil)
}

// GateDelete removes a gate; its key is then a plain (K=1) concurrency key.
func (db *DB) GateDelete(ctx context.Context, key string) error {
	var k string
	return translate(db.pool.QueryRow(ctx, stmt("GateDelete"), key).Scan(&k))
}
