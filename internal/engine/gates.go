package engine

import (
	"context"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
)

// Gate is a concurrency gate: at most Limit executing jobs of its key, counted on
// Shards slot rows, Available of them free now.
type Gate struct {
	Key                  string
	Limit                int
	Shards               int
	Available            int
	CreatedAt, UpdatedAt time.Time
}

func gateOf(g pg.Gate) Gate {
	return Gate{Key: g.Key, Limit: g.Limit, Shards: g.Shards, Available: g.Available, CreatedAt: g.CreatedAt, UpdatedAt: g.UpdatedAt}
}

// ListGates lists every gate.
func (e *Engine) ListGates(ctx context.Context) ([]Gate, error) {
	rows, err := e.db.GateList(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Gate, len(rows))
	for i, g := range rows {
		out[i] = gateOf(g)
	}
	return out, nil
}

// GetGate returns one gate; ErrNotFound when there is none for key.
func (e *Engine) GetGate(ctx context.Context, key string) (Gate, error) {
	g, err := e.db.GateGet(ctx, key)
	if err != nil {
		return Gate{}, err
	}
	return gateOf(g), nil
}

// DeleteGate removes a gate; ErrNotFound when there is none for key.
func (e *Engine) DeleteGate(ctx context.Context, key string) error {
	return e.db.GateDelete(ctx, key)
}

// RateLimit is a token bucket setting: Rate tokens per second, at most Burst stored,
// one bucket per key (Buckets of them exist).
type RateLimit struct {
	Name                 string
	Rate                 float64
	Burst                float64
	Buckets              int64
	CreatedAt, UpdatedAt time.Time
}

func rateLimitOf(r pg.RateLimit) RateLimit {
	return RateLimit{Name: r.Name, Rate: r.Rate, Burst: r.Burst, Buckets: r.Buckets, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

// ListRateLimits lists every rate limit.
func (e *Engine) ListRateLimits(ctx context.Context) ([]RateLimit, error) {
	rows, err := e.db.RateLimitList(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]RateLimit, len(rows))
	for i, l := range rows {
		out[i] = rateLimitOf(l)
	}
	return out, nil
}

// GetRateLimit returns one rate limit; ErrNotFound when none has the name.
func (e *Engine) GetRateLimit(ctx context.Context, name string) (RateLimit, error) {
	l, err := e.db.RateLimitGet(ctx, name)
	if err != nil {
		return RateLimit{}, err
	}
	return rateLimitOf(l), nil
}

// DeleteRateLimit removes a rate limit and its buckets; ErrNotFound when none has the name.
func (e *Engine) DeleteRateLimit(ctx context.Context, name string) error {
	return e.db.RateLimitDelete(ctx, name)
}
