package pg

import (
	"context"
	"time"

	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
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
	if db.citus != nil {
		return db.citusGateUpsert(ctx, key, limit, shards)
	}
	err := db.inTx(ctx, func(tx pgx.Tx) error {
		q := db.q.WithTx(tx)
		if _, err := q.GateUpsert(ctx, dbsqlc.GateUpsertParams{Key: key, GateLimit: limit, Shards: shards}); err != nil {
			return err
		}
		if err := q.GateSlotsLock(ctx, &key); err != nil {
			return err
		}
		if err := q.GateSlotsShape(ctx, dbsqlc.GateSlotsShapeParams{Key: key, GateLimit: limit, Shards: shards}); err != nil {
			return err
		}
		_, err := q.GateSlotsReconcile(ctx, &key)
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
	if db.citus != nil {
		return nil, nil // no counters on Citus: a slot is held by its step's row (citus_gates.go)
	}
	var repaired []dbsqlc.GateSlotsReconcileRow
	err := db.inTx(ctx, func(tx pgx.Tx) error {
		q := db.q.WithTx(tx)
		if err := q.GateSlotsLock(ctx, nil); err != nil {
			return err
		}
		var err error
		repaired, err = q.GateSlotsReconcile(ctx, nil)
		return err
	})
	return convertAll(repaired, func(r dbsqlc.GateSlotsReconcileRow) SlotRepair { return SlotRepair(r) }), err
}

// GateGet returns one gate.
func (db *DB) GateGet(ctx context.Context, key string) (Gate, error) {
	var gs []dbsqlc.GateListRow
	var err error
	if db.citus != nil {
		var c []Gate
		if c, err = db.citusGateList(ctx, &key); err == nil && len(c) == 1 {
			return c[0], nil
		}
	} else {
		gs, err = db.q.GateList(ctx, &key)
	}
	if err != nil {
		return Gate{}, translate(err)
	}
	if len(gs) == 0 {
		return Gate{}, ErrNotFound
	}
	return Gate(gs[0]), nil
}

// GateList returns every gate.
func (db *DB) GateList(ctx context.Context) ([]Gate, error) {
	if db.citus != nil {
		return db.citusGateList(ctx, nil)
	}
	gs, err := db.q.GateList(ctx, nil)
	return convertAll(gs, func(g dbsqlc.GateListRow) Gate { return Gate(g) }), translate(err)
}

// GateDelete removes a gate; its key is then a plain (K=1) concurrency key.
func (db *DB) GateDelete(ctx context.Context, key string) error {
	_, err := db.q.GateDelete(ctx, key)
	return translate(err)
}
