package pg

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/gendurable/gendurable/internal/pg/dbcitus"
)

// Displaced keys on Citus (docs/citus.md, "Displaced keys"; migrations/citus/0029): a job
// with a key and a concurrency key or a rate limit lives where the concurrency key or the
// bucket places it, since a claim keeps those exact only there. Its key is then away from
// the key's placement, where jobs_live_key cannot see it, and a row of key_holders at the
// key's placement names the job. A key is held by the live job that has it at its key's
// placement, or by the live job its holder row names. A holder row is not cleared when
// its job ends: a row that names a finished or deleted job holds nothing.
//
// Every insert and every revival (retry, replay, rerun) of a keyed job takes the key's
// transaction lock on the coordinator first (KeysLock), where they all run, and then reads
// both holders (citusKeysHeld). Two of them never take one key at once.

// The kinds of KeysLock (sql/citus/keys.sql): a job's key, and a debounce key.
const (
	lockKeys         = 1734634361 // 'gdky'
	lockDebounceKeys = 1734632546 // 'gddb'
)

// displacedKey reports whether item it, placed at placement, has a key that lives away
// from the key's placement (a key beside a concurrency key or a rate limit).
func displacedKey(it *JobInsert, placement int) bool {
	return it.Key != nil && it.Debounce == nil && placement != PlacementOfKey(*it.Key)
}

// citusKeysHeld takes the locks of keys (in tx, on the coordinator, held to its end) and
// answers the live job that holds each key that is held: at the key's placement, or named
// by its holder row. One round trip (the lock and the two reads of the keys' placements,
// sent together), and one more when a holder row names a job elsewhere.
func (db *DB) citusKeysHeld(ctx context.Context, tx pgx.Tx, l *citusLayout, keys []string) (map[string]int64, error) {
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	held := make(map[string]int64, len(keys))
	if len(keys) == 0 {
		return held, nil
	}
	placements := make([]int, len(keys))
	for i, k := range keys {
		placements[i] = PlacementOfKey(k)
	}
	batch := &pgx.Batch{}
	batch.Queue(dbcitus.KeysLock, lockKeys, keys)
	batch.Queue(dbcitus.KeysLive, placements, keys)
	batch.Queue(dbcitus.KeyHoldersGet, placements, keys)
	results := tx.SendBatch(ctx, batch)
	defer func() { _ = results.Close() }()
	if _, err := results.Exec(); err != nil {
		return nil, err
	}
	var holders []int64
	holderKey := map[int64]string{}
	for pass := range 2 {
		rows, err := results.Query()
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var placement int
			var key string
			var id int64
			if err := rows.Scan(&placement, &key, &id); err != nil {
				rows.Close()
				return nil, err
			}
			// The reads cover every key at every placement asked for: only a key's own
			// placement answers for it.
			if int(placement) != PlacementOfKey(key) {
				continue
			}
			if pass == 0 {
				held[key] = id
			} else if _, live := held[key]; !live && l.PlacementOfID(id) != placement {
				// (a row naming a job at the key's placement: the first read covered it)
				holders = append(holders, id)
				holderKey[id] = key
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	if err := results.Close(); err != nil {
		return nil, err
	}
	if len(holders) == 0 {
		return held, nil
	}
	at := make([]int, len(holders))
	for i, id := range holders {
		at[i] = l.PlacementOfID(id)
	}
	live, err := dbcitus.New(tx).JobsLiveByID(ctx, dbcitus.JobsLiveByIDParams{Placements: at, Ids: holders})
	if err != nil {
		return nil, err
	}
	for _, j := range live {
		if k, ok := holderKey[j.ID]; ok && k == j.Key {
			held[k] = j.ID
		}
	}
	return held, nil
}

// citusPutKeyHolders names each job of ids as the holder of the key beside it, at the
// key's placement (the caller holds the keys' locks and found them free).
func citusPutKeyHolders(ctx context.Context, q *dbcitus.Queries, keys []string, ids []int64) error {
	if len(keys) == 0 {
		return nil
	}
	placements := make([]int, len(keys))
	for i, k := range keys {
		placements[i] = PlacementOfKey(k)
	}
	return q.KeyHoldersPut(ctx, dbcitus.KeyHoldersPutParams{Placements: placements, Keys: keys, JobIds: ids})
}

// citusLiveByKey is the live job holding key: at the key's placement (a router read), or,
// when none is there, the job its holder row names, if that job is live and has the key.
func (db *DB) citusLiveByKey(ctx context.Context, q *dbcitus.Queries, key string) (Job, error) {
	j, err := q.JobGetLiveByKey(ctx, dbcitus.JobGetLiveByKeyParams{Placement: PlacementOfKey(key), JobKey: key})
	if err == nil || !errors.Is(err, pgx.ErrNoRows) {
		return citusJob(j), err
	}
	id, found, err := db.citusDisplacedHolder(ctx, q, key)
	if err != nil || !found {
		return Job{}, cmp.Or(err, pgx.ErrNoRows)
	}
	return db.citusJobByID(ctx, q, id)
}

// citusDisplacedHolder is the live job that key's holder row names, when it names one
// that is live and has the key.
func (db *DB) citusDisplacedHolder(ctx context.Context, q *dbcitus.Queries, key string) (int64, bool, error) {
	rows, err := q.KeyHoldersGet(ctx, dbcitus.KeyHoldersGetParams{Placements: []int{PlacementOfKey(key)}, Keys: []string{key}})
	if err != nil || len(rows) == 0 {
		return 0, false, err
	}
	l, err := db.layout(ctx)
	if err != nil {
		return 0, false, err
	}
	id := rows[0].JobID
	live, err := q.JobsLiveByID(ctx, dbcitus.JobsLiveByIDParams{Placements: []int{l.PlacementOfID(id)}, Ids: []int64{id}})
	if err != nil || len(live) == 0 || live[0].Key != key {
		return 0, false, err
	}
	return id, true, nil
}

// citusRevive runs revive, which makes job id (at placement) live again, in a transaction
// that first takes its key's lock and checks that no other live job holds the key
// (ErrConflict otherwise); the job is named its key's holder (every write that makes a
// keyed job live writes the row: see citusInsertTx). The
// job's key is read first (nil: no key, nothing to check). revive returns the job that
// now holds the key (id, or the new job of a rerun).
func (db *DB) citusRevive(ctx context.Context, id int64, placement int,
	revive func(q *dbcitus.Queries) (int64, error)) error {
	l, err := db.layout(ctx)
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		q := dbcitus.New(tx)
		key, err := q.JobKey(ctx, dbcitus.JobKeyParams{Placement: placement, ID: id})
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && key == nil) {
			_, err = revive(q)
			return err
		}
		if err != nil {
			return err
		}
		held, err := db.citusKeysHeld(ctx, tx, l, []string{*key})
		if err != nil {
			return err
		}
		if h, ok := held[*key]; ok && h != id {
			// Another live job holds the key. (A live job holding its own key is not
			// finished: the statement below changes nothing, ErrNotFound, as on plain
			// PostgreSQL.)
			return fmt.Errorf("%w: a live job holds the key %q", ErrConflict, *key)
		}
		holder, err := revive(q)
		if err != nil {
			return err
		}
		return citusPutKeyHolders(ctx, q, []string{*key}, []int64{holder})
	})
}
