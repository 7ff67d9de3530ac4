package pg

import (
	"context"
	"time"

	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
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
	if _, err := db.q.RateLimitUpsert(ctx, dbsqlc.RateLimitUpsertParams{Name: name, Rate: rate, Burst: burst}); err != nil {
		return RateLimit{}, translate(err)
	}
	return db.RateLimitGet(ctx, name)
}

// RateLimitGet returns one rate limit.
func (db *DB) RateLimitGet(ctx context.Context, name string) (RateLimit, error) {
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
	ls, err := db.q.RateLimitList(ctx, nil)
	return convertAll(ls, func(l dbsqlc.RateLimitListRow) RateLimit { return RateLimit(l) }), translate(err)
}

// RateLimitDelete removes a rate limit and its buckets.
func (db *DB) RateLimitDelete(ctx context.Context, name string) error {
	_, err := db.q.RateLimitDelete(ctx, name)
	return translate(err)
}
