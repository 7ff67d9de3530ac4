package pg

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// StatementCounter counts the statements a pool sends, by statement name (the
// "-- name:" of sql/*.sql, which sqlc keeps as the first line; "other" for ad-hoc SQL). Tests use it to hold the
// statements-per-step budget; the bench reports it.
type StatementCounter struct {
	mu     sync.Mutex
	counts map[string]int
	time   map[string]time.Duration
}

type traceKey struct{}

type traceStart struct {
	name string
	at   time.Time
}

// TraceQueryStart implements pgx.QueryTracer.
func (c *StatementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	name := statementName(data.SQL)
	if name == "other" && strings.HasPrefix(strings.TrimSpace(data.SQL), "-- probe") {
		return ctx
	}
	c.mu.Lock()
	if c.counts == nil {
		c.counts = map[string]int{}
		c.time = map[string]time.Duration{}
	}
	c.counts[name]++
	c.mu.Unlock()
	return context.WithValue(ctx, traceKey{}, traceStart{name: name, at: time.Now()})
}

// TraceQueryEnd implements pgx.QueryTracer.
func (c *StatementCounter) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if st, ok := ctx.Value(traceKey{}).(traceStart); ok {
		c.mu.Lock()
		c.time[st.name] += time.Since(st.at)
		c.mu.Unlock()
	}
}

// Time is the total time statement name took, as the client saw it (round trips included).
func (c *StatementCounter) Time(name string) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.time[name]
}

// Count is how many times statement name ran.
func (c *StatementCounter) Count(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[name]
}

// Snapshot copies every count.
func (c *StatementCounter) Snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

// Reset zeroes every count.
func (c *StatementCounter) Reset() {
	c.mu.Lock()
	c.counts = nil
	c.mu.Unlock()
}

// TraceBatchStart is part of pgx.BatchTracer: a batch's statements are counted one by
// one as they are answered (TraceBatchQuery); the Citus dialect sends its router
// statements in batches.
func (c *StatementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

// TraceBatchQuery counts one statement of a batch (its time is not measured).
func (c *StatementCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	name := statementName(data.SQL)
	c.mu.Lock()
	if c.counts == nil {
		c.counts = map[string]int{}
		c.time = map[string]time.Duration{}
	}
	c.counts[name]++
	c.mu.Unlock()
}

// TraceBatchEnd is part of pgx.BatchTracer.
func (c *StatementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
