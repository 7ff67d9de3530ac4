// Package pg is gendurable's only door to PostgreSQL: the connection pool, every SQL
// statement (sql/*.sql, compiled by sqlc into dbsqlc; one typed wrapper each), the migrations runner,
// LISTEN/NOTIFY, and a local cluster starter for development and tests. Nothing above
// this package sees pgx types; driver errors leave it as the sentinel errors of errors.go.
package pg

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DB is a pool of connections to gendurable's database.
type DB struct {
	pool *pgxpool.Pool
	// session serves what keeps session state across statements (the LISTEN connection,
	// the migrations' advisory lock): a pool on Options.DirectURL, or pool itself.
	session *pgxpool.Pool
	q       *dbsqlc.Queries
	// plannedPages is the size of jobs, in pages, when the pool's connections were opened
	// or last reset: their cached plans were made for about that size (ReplanIfGrown).
	plannedPages atomic.Int64
	// citus is set when the database is on a Citus coordinator (docs/citus.md): the
	// statements then run in their Citus dialect (internal/pg/sql/citus).
	citus *citusLayout
	// claimCursor is where the Citus claims of each queue start (citusClaim).
	claimCursor citusClaimCursor
	// warmth is which shards each queue's Citus claims pass over (citusWarmth).
	warmth citusWarmth
	// urgency is which shards each queue's Citus claims visit first (citusUrgency).
	urgency citusUrgency
	// fairShards is what each shard held at the last fair claim of each fair queue on
	// Citus, which the next claims are split by (citusFairShards).
	fairShards citusFairShards
	// shardsMovedAway counts the statements on a shard's tables refused because the shard
	// had moved, and run through the coordinator instead (onShard).
	shardsMovedAway atomic.Int64
	// knownQueues holds the queues this process has made sure exist (Citus inserts: the
	// queues table is a reference table, written on every node).
	knownQueues sync.Map
	// shardTimeout and circuits bound a Citus statement on one shard, and pass over a
	// worker that does not answer (citus_circuit.go).
	shardTimeout time.Duration
	circuits     workerCircuits
	// workers are the pools on the Citus workers that a shard's statements go to
	// (citus_direct.go).
	workers citusWorkerPools
}

// Pooler names what the database URL reaches: PostgreSQL itself, or a connection pooler
// that hands each transaction to any of its server connections.
type Pooler string

const (
	// PoolerNone is PostgreSQL itself (or a session-mode pooler): each statement is
	// prepared once per connection (a named prepared statement) and planned once
	// (plan_cache_mode=force_generic_plan, jit=off, sent as start-up parameters).
	PoolerNone Pooler = "none"
	// PoolerTransaction is a transaction-mode pooler (PgBouncer pool_mode=transaction):
	// no named prepared statements (PgBouncer before 1.21 cannot track them) and no
	// start-up parameters beyond application_name (PgBouncer refuses the others). Each
	// statement is sent as the unnamed statement with the parameter and result types
	// cached on the client (pgx's QueryExecModeCacheDescribe: one round trip, binary
	// formats), and is parsed and planned by PostgreSQL at every execution. A database
	// URL that names default_query_exec_mode keeps its choice.
	PoolerTransaction Pooler = "transaction"
)

// ParsePooler reads a Pooler's name ("" is PoolerNone).
func ParsePooler(s string) (Pooler, error) {
	switch p := Pooler(s); p {
	case "", PoolerNone:
		return PoolerNone, nil
	case PoolerTransaction:
		return p, nil
	}
	return "", fmt.Errorf("pg: pooler %q is not none or transaction", s)
}

// Options tunes Open. The zero value is a sensible default.
type Options struct {
	// MaxConns caps the pool (default: pgxpool's default, max(4, NumCPU)).
	MaxConns int32
	// Counter, when set, counts every statement the pool runs (tests and the bench).
	Counter *StatementCounter
	// Pooler says what the URL reaches (default PoolerNone: PostgreSQL itself).
	Pooler Pooler
	// DirectURL reaches PostgreSQL itself, past any transaction-mode pooler, for what
	// holds session state across statements: the LISTEN connection and the migrations'
	// advisory lock (default: the URL given to Open). At most two connections, named
	// gendurable-direct in pg_stat_activity.
	DirectURL string
	// ShardTimeout is the deadline of a statement on one shard of a Citus cluster: a
	// worker that does not answer within it is passed over for a while (default
	// DefaultShardTimeout; plain PostgreSQL has no shards and ignores it).
	ShardTimeout time.Duration
	// CitusRoute says where a Citus cluster's statements on one shard go (default
	// CitusRouteAuto: to the worker that holds the shard, unless Pooler is
	// PoolerTransaction); plain PostgreSQL ignores it.
	CitusRoute CitusRoute
}

// Open connects to url (and to opts.DirectURL) and checks the connections.
func Open(ctx context.Context, url string, opts Options) (*DB, error) {
	cfg, err := poolConfig(url, opts.Pooler, opts)
	if err != nil {
		return nil, err
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pg: connect: %w", err)
	}
	db := &DB{pool: pool, session: pool, q: dbsqlc.New(pool), shardTimeout: cmp.Or(opts.ShardTimeout, DefaultShardTimeout)}
	if opts.DirectURL != "" {
		dcfg, err := poolConfig(opts.DirectURL, PoolerNone, opts)
		if err != nil {
			pool.Close()
			return nil, fmt.Errorf("direct url: %w", err)
		}
		dcfg.MaxConns = 1 // a migration run (each LISTEN opens its own connection, listenConn)
		dcfg.ConnConfig.RuntimeParams["application_name"] = "gendurable-direct"
		if db.session, err = pgxpool.NewWithConfig(ctx, dcfg); err != nil {
			pool.Close()
			return nil, fmt.Errorf("pg: connect (direct url): %w", err)
		}
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		db.Close()
		return nil, fmt.Errorf("pg: ping: %w", err)
	}
	if db.session != pool {
		if err := db.session.Ping(pingCtx); err != nil {
			db.Close()
			return nil, fmt.Errorf("pg: ping (direct url): %w", err)
		}
	}
	if err := db.detectCitus(pingCtx); err != nil {
		db.Close()
		return nil, err
	}
	if db.citus != nil && cfg.ConnConfig.RuntimeParams["plan_cache_mode"] == "force_generic_plan" {
		// On Citus the coordinator plans each statement's distribution, and prunes a
		// router statement's shard from its parameters at execution (deferred pruning)
		// under its own plan cache; a forced generic plan of some statements crashed the
		// coordinator (Citus 13.2: an INSERT ... ON CONFLICT DO UPDATE on a reference table).
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "auto"
		pool.Close()
		if pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
			db.Close()
			return nil, fmt.Errorf("pg: connect: %w", err)
		}
		if db.session == db.pool {
			db.session = pool
		}
		db.pool, db.q = pool, dbsqlc.New(pool)
	}
	auto := opts.CitusRoute == CitusRouteAuto && opts.Pooler != PoolerTransaction
	if db.citus != nil && (auto || opts.CitusRoute == CitusRouteShards || opts.CitusRoute == CitusRouteWorkers) {
		db.workers.config = db.pool.Config()
		db.workers.shardTables = opts.CitusRoute == CitusRouteShards
	}
	return db, nil
}

// cancelGrace is how long a statement whose context ended may take to answer the cancel
// request before its connection is closed: a server that does not answer (a network
// partition) holds up the caller (a shutdown, a 503) by no more than this.
const cancelGrace = time.Second

// cancelInTheDatabase makes a statement whose context ends (an API call's deadline, a
// shutdown) end in the database before the call returns: a cancel request, then the
// statement's own answer, within cancelGrace. pgx's default closes the socket at once and
// sends the cancel afterwards from a goroutine, so a statement waiting on a lock could
// still commit after its caller had been told it failed (an API call's 503 that wrote).
func cancelInTheDatabase(c *pgconn.PgConn) ctxwatch.Handler {
	return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: cancelGrace}
}

// poolConfig is the pool configuration for url when it reaches pooler.
func poolConfig(url string, pooler Pooler, opts Options) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("pg: parse database url: %w", err)
	}
	if opts.Counter != nil {
		cfg.ConnConfig.Tracer = opts.Counter
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "gendurable"
	cfg.AfterConnect = registerJSONB
	cfg.ConnConfig.BuildContextWatcherHandler = cancelInTheDatabase
	switch pooler {
	case "", PoolerNone:
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
	case PoolerTransaction:
		// A server connection serves another client after each transaction: a statement
		// named on one is missing on the next, or already there ("prepared statement
		// stmtcache_… already exists"), and jit or plan_cache_mode can only be set on the
		// role or database (docs/configuration.md). The unnamed statement is parsed, bound
		// and executed in one round trip, so it never crosses server connections.
		if !strings.Contains(url, "default_query_exec_mode") {
			cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
		}
	default:
		return nil, fmt.Errorf("pg: pooler %q is not none or transaction", pooler)
	}
	// A generic plan is made from the statistics of its first execution on a connection
	// and kept for the connection's life. Planned on a new, empty jobs table, the pick's
	// final UPDATE and JobReadyExists scan jobs sequentially, and they kept doing so after
	// a bulk load until the connection closed (measured: ~50 ms a pick, 2 000 steps/s,
	// for as long as pgxpool's default hour). Connections are recycled every few minutes
	// instead, so statements are re-planned on the statistics autovacuum has gathered.
	cfg.MaxConnLifetime = 3 * time.Minute
	cfg.MaxConnLifetimeJitter = time.Minute
	return cfg, nil
}

// Close closes every connection.
func (db *DB) Close() {
	db.closeWorkerPools()
	if db.session != db.pool {
		db.session.Close()
	}
	db.pool.Close()
}

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
