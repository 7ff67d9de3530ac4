package pg

import (
	"cmp"
	"context"
	"time"

	"github.com/gendurable/gendurable/internal/pg/dbcitus"
	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
	"github.com/jackc/pgx/v5"
)

// RateLimit is a token bucket setting: Rate tokens per second, at most Burst stored,
// one bucket per key.
type RateLimit struct {
	Name                 string
	Rate                 float64
	Burst                float64
	CreatedAt, UpdatedAt time.Time
	Buckets              int64
}

// RateLimitUpsert creates or changes a rate limit.
func (db *DB) RateLimitUpsert(ctx context.Context, name string, rate, burst float64) (RateLimit, error) {
	if db.citus != nil {
		// sql/citus/rates.sql: the limit, its buckets capped at the burst, the buckets of
		// its live jobs minted again where missing, the steps its remote buckets gave back
		// made runnable now; one transaction, then their queues woken.
		var woken []dbcitus.RateWaitsWakeRow
		err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
			q := dbcitus.New(tx)
			if err := q.RateLimitPut(ctx, dbcitus.RateLimitPutParams{Name: name, Rate: rate, Burst: burst}); err != nil {
				return err
			}
			if err := q.RateBucketsCap(ctx, dbcitus.RateBucketsCapParams{Burst: burst, Name: name}); err != nil {
				return err
			}
			if err := q.RateBucketsRemint(ctx, name); err != nil {
				return err
			}
			var err error
			woken, err = q.RateWaitsWake(ctx, name)
			return err
		})
		if err != nil {
			return RateLimit{}, translate(err)
		}
		wake := make([]citusWake, len(woken))
		for i, w := range woken {
			wake[i] = citusWake{queue: w.Queue, placement: int(w.Placement)}
		}
		if err := db.citusNotify(ctx, wake); err != nil {
			return RateLimit{}, err
		}
		return db.RateLimitGet(ctx, name)
	}
	if _, err := db.q.RateLimitUpsert(ctx, dbsqlc.RateLimitUpsertParams{Name: name, Rate: rate, Burst: burst}); err != nil {
		return RateLimit{}, translate(err)
	}
	return db.RateLimitGet(ctx, name)
}

// RateLimitGet returns one rate limit.
func (db *DB) RateLimitGet(ctx context.Context, name string) (RateLimit, error) {
	if db.citus != nil {
		ls, err := db.citusRateLimits(ctx, &name)
		if err != nil || len(ls) == 0 {
			return RateLimit{}, cmp.Or(err, ErrNotFound)
		}
		return ls[0], nil
	}
	ls, err := db.q.RateLimitList(ctx, &name)
	if err != nil {
		return RateLimit{}, translate(err)
	}
	if len(ls) == 0 {
		return RateLimit{}, ErrNotFound
	}
	return RateLimit(ls[0]), nil
}

// RateLimitList returns every rate limit.
func (db *DB) RateLimitList(ctx context.Context) ([]RateLimit, error) {
	if db.citus != nil {
		return db.citusRateLimits(ctx, nil)
	}
	ls, err := db.q.RateLimitList(ctx, nil)
	return convertAll(ls, func(l dbsqlc.RateLimitListRow) RateLimit { return RateLimit(l) }), translate(err)
}

// RateLimitDelete removes a rate limit and its buckets.
func (db *DB) RateLimitDelete(ctx context.Context, name string) error {
	_, err := db.q.RateLimitDelete(ctx, name)
	return translate(err)
}

// citusRateLimits is RateLimitList on Citus: the limits (a reference table), then their
// bucket counts on every shard at once.
func (db *DB) citusRateLimits(ctx context.Context, name *string) ([]RateLimit, error) {
	q := dbcitus.New(db.pool)
	ls, err := q.RateLimitList(ctx, name)
	if err != nil {
		return nil, translate(err)
	}
	counts, err := q.RateBucketCounts(ctx, name)
	if err != nil {
		return nil, translate(err)
	}
	buckets := map[string]int64{}
	for _, c := range counts {
		buckets[c.Name] = c.Buckets
	}
	return convertAll(ls, func(l dbcitus.RateLimit) RateLimit {
		return RateLimit{Name: l.Name, Rate: l.Rate, Burst: l.Burst, CreatedAt: l.CreatedAt, UpdatedAt: l.UpdatedAt,
			Buckets: buckets[l.Name]}
	}), nil
}
