package pg

import (
	"context"
	"time"

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
	r, err := db.q.JobCancelMany(ctx, dbsqlc.JobCancelManyParams{MaxRows: limit, Statuses: f.Statuses,
		Queue: f.Queue, Handler: f.Handler, CreatedAfter: f.CreatedAfter, CreatedBefore: f.CreatedBefore,
		KeyPrefix: f.KeyPrefix})
	return BulkChanged{Changed: int(r.Changed), More: r.More}, translate(err)
}

// JobRetryMany retries up to limit failed or cancelled jobs matching f in one statement.
func (db *DB) JobRetryMany(ctx context.Context, f JobFilter, limit int) (BulkChanged, error) {
	r, err := db.q.JobRetryMany(ctx, dbsqlc.JobRetryManyParams{MaxRows: limit, Statuses: f.Statuses,
		Queue: f.Queue, Handler: f.Handler, CreatedAfter: f.CreatedAfter, CreatedBefore: f.CreatedBefore,
		KeyPrefix: f.KeyPrefix})
	return BulkChanged{Changed: int(r.Changed), More: r.More}, translate(err)
}
