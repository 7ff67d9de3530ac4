package pg

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
)

// Fairness settings of a queue (queues.fairness).
const (
	FairnessNone       = "none"
	FairnessRoundRobin = "round_robin"
)

// FairClaimParams says what one fair claim claims: JobClaimParams and the claiming
// process's slots for the queue, which each key's share of them is cut from.
type FairClaimParams struct {
	JobClaimParams
	// Slots is the steps this process runs at once for the queue (its max_in_flight).
	Slots int
	// Own is how many steps of each fairness key this process runs now (the dispatcher
	// counts them): a key's share of Slots is cut by its own.
	Own map[string]int
}

// JobClaimFair claims up to p.Limit runnable steps of a fair queue, its fairness keys
// taking turns by weight within their shares and caps (JobClaimFair in
// sql/job_claim.sql). The queue's row is locked first, in the same implicit transaction
// and round trip (a pipelined batch of two statements), so that the fair claims of a
// queue are serialised: each sees the claims before it, which keeps the caps exact. On
// Citus, per shard and queue (citusClaimFair).
func (db *DB) JobClaimFair(ctx context.Context, p FairClaimParams) ([]ClaimedJob, error) {
	if db.citus != nil {
		return db.citusClaimFair(ctx, p)
	}
	b := db.pool.SendBatch(ctx, fairClaimBatch(p))
	defer func() { _ = b.Close() }()
	if _, err := b.Exec(); err != nil {
		return nil, translate(err)
	}
	rows, err := b.Query()
	if err != nil {
		return nil, translate(err)
	}
	claimed, _, err := readClaimed(rows, p.JobClaimParams, claimFairColumns)
	if err != nil {
		return nil, err
	}
	return claimed, translate(b.Close())
}

// fairClaimBatch is the fair claim's two statements: the lock of the queue's row, then
// the claim (its arguments in dbsqlc.JobClaimFair's $n order).
func fairClaimBatch(p FairClaimParams) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue(dbsqlc.QueueLockFair, p.Queue)
	keys, counts := make([]string, 0, len(p.Own)), make([]int, 0, len(p.Own))
	for k, n := range p.Own {
		keys, counts = append(keys, k), append(counts, n)
	}
	b.Queue(dbsqlc.JobClaimFair, p.Queue, p.Limit, p.Slots, keys, counts, p.LeaseTTL.Milliseconds(), p.Owner, int64(p.SignalCap))
	return b
}

// FairnessKey is one fairness key of a queue: its settings (weight 1 and no cap when it
// has none of its own) and its live counts.
type FairnessKey struct {
	Queue       string
	Key         string
	Weight      int
	MaxInFlight *int // nil: no cap
	Declared    bool // whether the key has settings of its own
	Runnable    int64
	InFlight    int64
	UpdatedAt   *time.Time
}

// FairnessKeyPut sets a key's settings in a queue (all of them: nil weight is 1, nil cap
// none) and returns the key with its counts.
func (db *DB) FairnessKeyPut(ctx context.Context, queue, key string, weight, maxInFlight *int) (FairnessKey, error) {
	if _, err := db.q.FairnessKeyUpsert(ctx, dbsqlc.FairnessKeyUpsertParams{Queue: queue, Key: key, Weight: weight,
		MaxInFlight: maxInFlight}); err != nil {
		return FairnessKey{}, translate(err)
	}
	return db.FairnessKeyGet(ctx, queue, key)
}

// FairnessKeyGet returns one key of a queue with its counts (any key: one without
// settings has weight 1 and no cap).
func (db *DB) FairnessKeyGet(ctx context.Context, queue, key string) (FairnessKey, error) {
	keys, _, err := db.FairnessKeyList(ctx, FairnessKeyListParams{Queue: queue, Prefix: key, Limit: 1})
	if err != nil {
		return FairnessKey{}, err
	}
	for _, k := range keys {
		if k.Key == key {
			return k, nil
		}
	}
	return FairnessKey{Queue: queue, Key: key, Weight: 1}, nil
}

// FairnessKeyDelete drops a key's settings (ErrNotFound when it has none).
func (db *DB) FairnessKeyDelete(ctx context.Context, queue, key string) error {
	_, err := db.q.FairnessKeyDelete(ctx, dbsqlc.FairnessKeyDeleteParams{Queue: queue, Key: key})
	return translate(err)
}

// FairnessKeyListParams says which keys of a queue to list.
type FairnessKeyListParams struct {
	Queue  string
	After  *string // the last key of the previous page (nil: from the first)
	Prefix string  // only keys starting with it ("" all)
	// ByRunnable lists the keys with the most runnable jobs first (one page; it counts
	// every runnable keyed job of the queue).
	ByRunnable bool
	Limit      int
}

// FairnessKeyList lists a page of a queue's keys that have live work or settings, with
// their counts; more reports whether a next page exists (key order only).
func (db *DB) FairnessKeyList(ctx context.Context, p FairnessKeyListParams) (keys []FairnessKey, more bool, err error) {
	if db.citus != nil {
		return db.citusFairnessKeyList(ctx, p)
	}
	if p.ByRunnable {
		rows, err := db.q.FairnessKeyTop(ctx, dbsqlc.FairnessKeyTopParams{Queue: p.Queue, Prefix: p.Prefix, PageSize: p.Limit})
		if err != nil {
			return nil, false, translate(err)
		}
		return convertAll(rows, func(r dbsqlc.FairnessKeyTopRow) FairnessKey {
			return fairnessKeyOf(p.Queue, dbsqlc.FairnessKeyListRow(r))
		}), false, nil
	}
	rows, err := db.q.FairnessKeyList(ctx, dbsqlc.FairnessKeyListParams{Queue: p.Queue, After: p.After, Prefix: p.Prefix,
		PageSize: p.Limit})
	if err != nil {
		return nil, false, translate(err)
	}
	if len(rows) > p.Limit {
		rows, more = rows[:p.Limit], true
	}
	return convertAll(rows, func(r dbsqlc.FairnessKeyListRow) FairnessKey { return fairnessKeyOf(p.Queue, r) }), more, nil
}

func fairnessKeyOf(queue string, r dbsqlc.FairnessKeyListRow) FairnessKey {
	return FairnessKey{Queue: queue, Key: r.Key, Weight: r.Weight, MaxInFlight: r.MaxInFlight, Declared: r.Declared,
		Runnable: r.Runnable, InFlight: r.InFlight, UpdatedAt: r.UpdatedAt}
}
