// Package pg is gendurable's only door to PostgreSQL: the connection pool, every SQL
// statement (sql/*.sql, compiled by sqlc into dbsqlc; one typed wrapper each), the migrations runner,
// LISTEN/NOTIFY, and a local cluster starter for development and tests. Nothing above
// this package sees pgx types; driver errors leave it as the sentinel errors of errors.go.
package pg

import (
	"context"
	"fmt"
	"time"

	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DB is a pool of connections to gendurable's database.
type DB struct {
	pool *pgxpool.Pool
	q    *dbsqlc.Queries
}

// Options tunes Open. The zero value is a sensible default.
type Options struct {
	// MaxConns caps the pool (default: pgxpool's default, max(4, NumCPU)).
	MaxConns int32
	// Counter, when set, counts every statement the pool runs (tests and the bench).
	Counter *StatementCounter
}

// Open connects to url and checks the connection.
func Open(ctx context.Context, url string, opts Options) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("pg: parse database url: %w", err)
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	if opts.Counter != nil {
		cfg.ConnConfig.Tracer = opts.Counter
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "gendurable"
	// No JIT: on a large jobs table the planner's estimates cross jit_above_cost and every
	// pick paid ~100 ms compiling LLVM code for a statement that runs in ~2 ms (measured
	// at 1 000 000 rows). Short OLTP statements never win it back.
	cfg.ConnConfig.RuntimeParams["jit"] = "off"
	// Plan each statement once per connection. The hot statements are large CTEs whose
	// planning costs more than their execution (the pick: ~0.7 ms to plan, ~0.9 ms to run),
	// and every statement here is written to take the same plan whatever its parameters
	// (queue = $1 on jobs_pick, primary keys driven by ANY(ARRAY(...)), unnest'ed arrays);
	// the plan tests hold that under a forced generic plan.
	cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	// A generic plan is made from the statistics of its first execution on a connection
	// and kept for the connection's life. Planned on a new, empty jobs table, the pick's
	// final UPDATE and JobReadyExists scan jobs sequentially, and they kept doing so after
	// a bulk load until the connection closed (measured: ~50 ms a pick, 2 000 steps/s,
	// for as long as pgxpool's default hour). Connections are recycled every few minutes
	// instead, so statements are re-planned on the statistics autovacuum has gathered.
	cfg.MaxConnLifetime = 3 * time.Minute
	cfg.MaxConnLifetimeJitter = time.Minute
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pg: connect: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("pg: ping: %w", err)
	}
	return &DB{pool: pool, q: dbsqlc.New(pool)}, nil
}

// Close closes every connection.
func (db *DB) Close() { db.pool.Close() }

// Ping checks that the database answers.
func (db *DB) Ping(ctx context.Context) error { return translate(db.pool.Ping(ctx)) }

// PoolStats is a snapshot of the pool for metrics.
type PoolStats struct {
	Total, Idle, InUse, Max int32
	AcquireCount            int64
	AcquireWait             time.Duration
}

// Stats reports the pool's current state.
func (db *DB) Stats() PoolStats {
	s := db.pool.Stat()
	return PoolStats{
		Total: s.TotalConns(), Idle: s.IdleConns(), InUse: s.AcquiredConns(), Max: s.MaxConns(),
		AcquireCount: s.AcquireCount(), AcquireWait: s.AcquireDuration(),
	}
}

// Exec runs one statement that returns no rows (tests, tools and the bench).
func (db *DB) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := db.pool.Exec(ctx, sql, args...)
	if err != nil {
		return 0, translate(err)
	}
	return tag.RowsAffected(), nil
}

// QueryStrings runs one statement and returns its rows with every column rendered as
// text (NULL as ""). For tests, EXPLAIN output and diagnostics, not the hot path.
func (db *DB) QueryStrings(ctx context.Context, sql string, args ...any) ([][]string, error) {
	rows, err := db.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out [][]string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, translate(err)
		}
		row := make([]string, len(vals))
		for i, v := range vals {
			if v != nil {
				row[i] = fmt.Sprint(v)
			}
		}
		out = append(out, row)
	}
	return out, translate(rows.Err())
}

// QueryInt runs a statement returning one integer (tests and diagnostics).
func (db *DB) QueryInt(ctx context.Context, sql string, args ...any) (int64, error) {
	var n int64
	err := db.pool.QueryRow(ctx, sql, args...).Scan(&n)
	return n, translate(err)
}

// convertAll maps generated rows to this package's types.
func convertAll[R, T any](rows []R, convert func(R) T) []T {
	if rows == nil {
		return nil
	}
	out := make([]T, len(rows))
	for i, r := range rows {
		out[i] = convert(r)
	}
	return out
}

// valueOr is *p, or absent when p is nil.
func valueOr[T any](p *T, absent T) T {
	if p == nil {
		return absent
	}
	return *p
}

// CheckStatements prepares every embedded statement once, so a schema/SQL mismatch is
// reported at start-up (and by the tests) rather than at the first job.
func (db *DB) CheckStatements(ctx context.Context) error {
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return translate(err)
	}
	defer conn.Release()
	for name, sql := range statements {
		if _, err := conn.Conn().Prepare(ctx, "", sql); err != nil {
			return fmt.Errorf("pg: statement %s: %w", name, err)
		}
	}
	return nil
}

// ExplainAnalyze runs sql under EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) inside a
// transaction that is rolled back, so a data-modifying statement changes nothing, and
// returns the JSON plan.
func (db *DB) ExplainAnalyze(ctx context.Context, sql string, args ...any) ([]byte, error) {
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return nil, translate(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	var plan []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql, args...).Scan(&plan); err != nil {
		return nil, translate(err)
	}
	return plan, nil
}
