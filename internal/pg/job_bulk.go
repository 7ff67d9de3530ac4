package pg

import (
	"cmp"
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gendurable/gendurable/internal/pg/dbcitus"
	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
)

// JobFilter selects the jobs of a bulk action; every set field narrows it (nil: any).
type JobFilter struct {
	Statuses      []string
	Queue         *string
	Handler       *string
	CreatedAfter  *time.Time // created_at >= CreatedAfter
	CreatedBefore *time.Time // created_at < CreatedBefore
	KeyPrefix     *string
}

// BulkChanged is what one batch of a bulk action did: the jobs it changed and whether
// matching jobs remain for another batch.
type BulkChanged struct {
	Changed int
	More    bool
}

// JobCancelMany cancels up to limit live jobs matching f (with their live descendants,
// counted in Changed) in one statement.
func (db *DB) JobCancelMany(ctx context.Context, f JobFilter, limit int) (BulkChanged, error) {
	if db.citus != nil {
		return db.citusBulk(ctx, limit, func(q *dbcitus.Queries, placements []int, rows int) (bulkPart, error) {
			r, err := q.JobCancelMany(ctx, dbcitus.JobCancelManyParams{MaxRows: rows, Placements: placements,
				Statuses: f.Statuses, Queue: f.Queue, Handler: f.Handler, CreatedAfter: f.CreatedAfter,
				CreatedBefore: f.CreatedBefore, KeyPrefix: f.KeyPrefix})
			return bulkPart{changed: int(r.Changed), more: r.More, woken: r.Woken}, err
		})
	}
	r, err := db.q.JobCancelMany(ctx, dbsqlc.JobCancelManyParams{MaxRows: limit, Statuses: f.Statuses,
		Queue: f.Queue, Handler: f.Handler, CreatedAfter: f.CreatedAfter, CreatedBefore: f.CreatedBefore,
		KeyPrefix: f.KeyPrefix})
	return BulkChanged{Changed: int(r.Changed), More: r.More}, translate(err)
}

// retryManyKeyPasses bounds the reads of a shard's candidate keys in a bulk retry on
// Citus, each leaving out the keys the one before found held elsewhere.
const retryManyKeyPasses = 4

// JobRetryMany retries up to limit failed or cancelled jobs matching f in one statement.
func (db *DB) JobRetryMany(ctx context.Context, f JobFilter, limit int) (BulkChanged, error) {
	if db.citus != nil {
		l, err := db.layout(ctx)
		if err != nil {
			return BulkChanged{}, err
		}
		// On each shard, in one transaction: the candidates' keys, their locks and their
		// holders anywhere (citusKeysHeld), asked again without the keys found held until
		// the window's keys are free; then the retry of the jobs whose keys are free, and
		// their holder rows (each retried keyed job holds its key, wherever it lives).
		return db.citusBulk(ctx, limit, func(_ *dbcitus.Queries, placements []int, rows int) (part bulkPart, err error) {
			err = pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
				q := dbcitus.New(tx)
				var free, held []string
				for pass := 0; ; pass++ {
					keys, err := q.JobRetryManyKeys(ctx, dbcitus.JobRetryManyKeysParams{MaxRows: rows, Placements: placements,
						Statuses: f.Statuses, Queue: f.Queue, Handler: f.Handler, CreatedAfter: f.CreatedAfter,
						CreatedBefore: f.CreatedBefore, KeyPrefix: f.KeyPrefix, HeldKeys: held})
					if err != nil {
						return err
					}
					found, err := db.citusKeysHeld(ctx, tx, l, keys)
					if err != nil {
						return err
					}
					free = free[:0]
					for _, k := range keys {
						if _, ok := found[k]; ok {
							held = append(held, k)
						} else {
							free = append(free, k)
						}
					}
					// Each pass leaves out at least one more held key; a window still holding
					// held keys after a few passes retries what it found free, and the next
					// batch goes on past them (More).
					if len(found) == 0 || pass == retryManyKeyPasses-1 {
						break
					}
				}
				r, err := q.JobRetryMany(ctx, dbcitus.JobRetryManyParams{MaxRows: rows, Placements: placements,
					Statuses: f.Statuses, Queue: f.Queue, Handler: f.Handler, CreatedAfter: f.CreatedAfter,
					CreatedBefore: f.CreatedBefore, KeyPrefix: f.KeyPrefix, FreeKeys: free})
				if err != nil {
					return err
				}
				part = bulkPart{changed: int(r.Changed), more: r.More, woken: r.Woken}
				return citusPutKeyHolders(ctx, q, r.RetriedKeys, r.RetriedIds)
			})
			return part, err
		})
	}
	r, err := db.q.JobRetryMany(ctx, dbsqlc.JobRetryManyParams{MaxRows: limit, Statuses: f.Statuses,
		Queue: f.Queue, Handler: f.Handler, CreatedAfter: f.CreatedAfter, CreatedBefore: f.CreatedBefore,
		KeyPrefix: f.KeyPrefix})
	return BulkChanged{Changed: int(r.Changed), More: r.More}, translate(err)
}

// bulkPart is what a bulk action did on one shard.
type bulkPart struct {
	changed int
	more    bool
	woken   []string // queues of the parents it made runnable, or of the jobs it retried
}

// citusBulk runs a bulk action on Citus (sql/citus/bulk.sql): one router statement per
// shard, shard after shard, each taking what the limit leaves, until the limit is reached
// or every shard was tried; then the wake-ups on the coordinator. The plain statement
// reads the whole table in id order, which Citus cannot run across shards (a recursion
// over the families, a join on the key that is not on the placement). Each shard's jobs
// go in id order; across shards, in shard order. More is set when a shard had more, or
// the limit stopped the walk before the last shard. A shard whose statement fails stops
// the walk: what the shards before it did is kept, and the caller's next batch goes on.
// What a family spread over shards is owed goes across them before it answers.
func (db *DB) citusBulk(ctx context.Context, limit int, run func(q *dbcitus.Queries, placements []int, rows int) (bulkPart, error)) (BulkChanged, error) {
	l, err := db.layout(ctx)
	if err != nil {
		return BulkChanged{}, err
	}
	var out BulkChanged
	var wake []citusWake
	q := dbcitus.New(db.pool)
	n := l.shardCount()
	for i := 0; i < n; i++ {
		if out.Changed >= limit {
			out.More = true
			break
		}
		placements := l.shardPlacements(i)
		part, err := run(q, placements, limit-out.Changed)
		if err != nil {
			return out, cmp.Or(translate(err), db.citusNotify(ctx, wake))
		}
		out.Changed += part.changed
		out.More = out.More || part.more
		wake = append(wake, citusWakes(part.woken, placements[0])...)
	}
	if out.Changed > 0 {
		// What it owes the families spread over shards (stubs it marked for cancel, remote
		// children it ended or revived), carried at once by one sweep: a fan-out probe, and
		// the shards it names. Best effort: what fails here the reaper's turn carries.
		_, _ = db.RemoteChildrenSweep(ctx, remoteChildEndsNowLimit)
	}
	return out, db.citusNotify(ctx, wake)
}
