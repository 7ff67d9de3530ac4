package pg

import (
	"context"
	"time"

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
	var r RateLimit
	err := db.pool.QueryRow(ctx, stmt("RateLimitUpsert"), name, rate, burst).Scan(&r.Name, &r.Rate, &r.Burst, &r.CreatedAt, &r.UpdatedAt)
	if err != nil {
		return r, translate(err)
	}
	return db.RateLimitGet(ctx, name)
}

func scanRateLimit(r pgx.Rows) (RateLimit, error) {
	var l RateLimit
	return l, r.Scan(&l.Name, &l.Rate, &l.Burst, &l.CreatedAt, &l.UpdatedAt, &l.Buckets)
}

// RateLimitGet returns one rate limit.
func (db *DB) RateLimitGet(ctx context.Context, name string) (RateLimit, error) {
	ls, err := collect(ctx, db, stmt("RateLimitList"), scanRateLimit, &name)
	if err != nil {
		return RateLimit{}, err
	}
	if len(ls) == 0 {
		return RateLimit{}, ErrNotFound
	}
	return ls[0], nil
}

// RateLimitList returns every rate limit.
func (db *DB) RateLimitList(ctx context.Context) ([]RateLimit, error) {
	return collect(ctx, db, stmt("RateLimitList"), scanRateLimit, nil)
}

// RateLimitDelete removes a rate limit and its buckets.
func (db *DB) RateLimitDelete(ctx context.Context, name string) error {
	var n string
	return translate(db.pool.QueryRow(ctx, stmt("RateLimitDelete"), name).Scan(&n))
}
