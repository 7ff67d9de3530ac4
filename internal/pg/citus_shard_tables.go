package pg

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A shard's statements on its own tables (docs/citus.md, "Routed to the workers"). A
// statement sent to a worker on the distributed tables is planned by Citus there: its
// distributed planning and its local executor cost more than the statement itself (a
// heartbeat of one lease: ~30× the same statement on the shard's table). So a claim, an
// outcome batch, a heartbeat or a reap of one shard names that shard's tables (jobs_102008,
// steps_102040, and the worker's copy of each reference table, handlers_102001...) and
// is planned and run by PostgreSQL alone, with its plan cached as any prepared statement.
//
// What Citus did for those statements that PostgreSQL does not is done here:
//   - Citus takes a share lock on the shard's metadata for each write, which a shard move
//     takes exclusively for its cut-over: a write lands before the move copies it or after,
//     on the new placement, never on a copy about to be dropped. Each transaction on a
//     shard's tables starts with gendurable_shard_here(shard id) (migrations/citus/0028),
//     which takes the same lock, then checks in a fresh snapshot that the shard is placed on
//     this node. A shard moved away (or split) fails that check: the transaction has done
//     nothing, the layout is read again, and the statements run on the distributed tables
//     through the coordinator, which routes them wherever the shard now is.
//   - Writes to a reference table must reach every node: no statement run here writes one
//     (TestCitusShardStatementsWriteNoReferenceTable).

// shardQuerier runs a shard's statements: a pool on the distributed tables (the
// coordinator's or the worker's), or shardTables on the worker's shard tables.
type shardQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// errShardElsewhere is the SQLSTATE gendurable_shard_here raises when the shard is not
// placed on the node it runs on (moved away, split, or not yet there).
const errShardElsewhereCode = "GDS01"

// shardElsewhere reports whether err, from statements on a shard's tables, says the shard
// is not on that node: gendurable_shard_here's refusal, or its tables no longer there
// (undefined_table: the old copy of a moved shard dropped; pgx prepares a batch's new
// statements before the guard runs).
func shardElsewhere(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == errShardElsewhereCode || pgErr.Code == "42P01")
}

// shardGuardSQL starts each transaction on a shard's tables (named as sqlc names the
// others, for pg_stat_statements readers such as cmd/bench).
const shardGuardSQL = "-- name: CitusShardGuard :exec\nSELECT gendurable_shard_here($1::bigint)"

// shardTableNames maps each Citus table's name to its relation on one shard's worker:
// the shard of a distributed table colocated with jobs, or a reference table's one shard.
type shardTableNames map[string]string

// shardTables is one shard's worker pool, with the statements rewritten to that shard's
// tables and guarded by gendurable_shard_here.
type shardTables struct {
	pool  *pgxpool.Pool
	shard int64 // the id of the shard of jobs
	names shardTableNames
}

// sql is the statement on this shard's tables (cached: a statement's text is rewritten
// once per shard).
func (s shardTables) sql(sql string) string {
	key := shardSQLKey{shard: s.shard, sql: sql}
	if r, ok := shardSQLCache.Load(key); ok {
		return r.(string)
	}
	r := rewriteTables(sql, s.names)
	shardSQLCache.Store(key, r)
	return r
}

type shardSQLKey struct {
	shard int64
	sql   string
}

// shardSQLCache holds the rewritten statements, by shard and text: a few statements per
// shard (shard ids are never reused, so an entry is never wrong, only unused).
var shardSQLCache sync.Map

func (s shardTables) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	br := s.SendBatch(ctx, b)
	defer br.Close() //nolint:errcheck // the statement's error is Exec's
	return br.Exec()
}

func (s shardTables) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	br := s.SendBatch(ctx, b)
	rows, err := br.Query()
	if err != nil {
		br.Close() //nolint:errcheck // err says what failed
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

func (s shardTables) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := s.Query(ctx, sql, args...)
	if err != nil {
		return errRow{err}
	}
	return rowOf{rows}
}

// SendBatch sends b on the shard's tables: each statement rewritten, and the guard first
// in its transaction (after b's BEGIN when it starts with one; else the batch is one
// implicit transaction). The answer reads b's results as queued: the guard's is read
// before the first one after it, and its error, if any, is that result's.
func (s shardTables) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	at := 0
	if len(b.QueuedQueries) > 0 && strings.EqualFold(strings.TrimSpace(b.QueuedQueries[0].SQL), "BEGIN") {
		at = 1
	}
	for _, q := range b.QueuedQueries {
		q.SQL = s.sql(q.SQL)
	}
	b.QueuedQueries = slices.Insert(b.QueuedQueries, at, &pgx.QueuedQuery{SQL: shardGuardSQL, Arguments: []any{s.shard}})
	return &guardedResults{BatchResults: s.pool.SendBatch(ctx, b), guardAt: at}
}

// guardedResults reads a batch's results past the guard queued at guardAt.
type guardedResults struct {
	pgx.BatchResults
	guardAt int
	read    int
}

// pass reads the guard's result when it comes next.
func (g *guardedResults) pass() error {
	if g.read == g.guardAt {
		g.read++
		if _, err := g.BatchResults.Exec(); err != nil {
			return err
		}
	}
	g.read++
	return nil
}

func (g *guardedResults) Exec() (pgconn.CommandTag, error) {
	if err := g.pass(); err != nil {
		return pgconn.CommandTag{}, err
	}
	return g.BatchResults.Exec()
}

func (g *guardedResults) Query() (pgx.Rows, error) {
	if err := g.pass(); err != nil {
		return nil, err
	}
	return g.BatchResults.Query()
}

func (g *guardedResults) QueryRow() pgx.Row {
	if err := g.pass(); err != nil {
		return errRow{err}
	}
	return g.BatchResults.QueryRow()
}

// batchRows are a query's rows that close its batch with them.
type batchRows struct {
	pgx.Rows
	br pgx.BatchResults
}

func (r *batchRows) Close() {
	r.Rows.Close()
	r.br.Close() //nolint:errcheck // the rows' error is Err's
}

// rowOf is the first row of rows, as pgx.Row.
type rowOf struct{ rows pgx.Rows }

func (r rowOf) Scan(dest ...any) error {
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// rewriteTables answers sql with each table of names replaced by its relation: every
// identifier token that names one, outside string literals, quoted identifiers and
// comments, and not qualified (a column reference such as j.queue is never a table).
func rewriteTables(sql string, names shardTableNames) string {
	var out strings.Builder
	out.Grow(len(sql) + 64)
	prev := byte(0) // the last character outside spaces, literals and comments
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == '\'' || c == '"': // a literal or a quoted identifier ('' and "" escape)
			j := i + 1
			for j < len(sql) {
				if sql[j] == c {
					if j+1 < len(sql) && sql[j+1] == c {
						j += 2
						continue
					}
					break
				}
				j++
			}
			j = min(j+1, len(sql))
			out.WriteString(sql[i:j])
			prev, i = c, j
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-': // a comment to the end of the line
			j := strings.IndexByte(sql[i:], '\n')
			if j < 0 {
				j = len(sql) - i
			}
			out.WriteString(sql[i : i+j])
			i += j
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			j := strings.Index(sql[i+2:], "*/")
			end := len(sql)
			if j >= 0 {
				end = i + 2 + j + 2
			}
			out.WriteString(sql[i:end])
			i = end
		case c == '$' && i+1 < len(sql) && (sql[i+1] == '$' || isIdentStart(sql[i+1])) && !isIdentPart(prev):
			// a dollar-quoted string ($$...$$, $tag$...$tag$); $1 is a parameter
			j := i + 1
			for j < len(sql) && isIdentPart(sql[j]) {
				j++
			}
			if j < len(sql) && sql[j] == '$' {
				tag := sql[i : j+1]
				end := strings.Index(sql[j+1:], tag)
				if end < 0 {
					end = len(sql)
				} else {
					end = j + 1 + end + len(tag)
				}
				out.WriteString(sql[i:end])
				prev, i = '$', end
				continue
			}
			out.WriteByte(c)
			prev, i = c, i+1
		case isIdentStart(c):
			j := i + 1
			for j < len(sql) && isIdentPart(sql[j]) {
				j++
			}
			word := sql[i:j]
			if rel, ok := names[strings.ToLower(word)]; ok && prev != '.' {
				out.WriteString(rel)
			} else {
				out.WriteString(word)
			}
			prev, i = 'a', j
		default:
			out.WriteByte(c)
			if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
				prev = c
			}
			i++
		}
	}
	return out.String()
}

func isIdentStart(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80
}

func isIdentPart(c byte) bool { return isIdentStart(c) || (c >= '0' && c <= '9') || c == '$' }

// readShardTables reads, on the coordinator, each shard's table names: the shards of the
// distributed tables colocated with jobs (partitions aside: statements name their parent),
// matched to jobs' shards by hash range, and the reference tables' one shard each.
func readShardTables(ctx context.Context, pool *pgxpool.Pool, jobsShards []int64) (map[int64]shardTableNames, error) {
	// Metadata of the coordinator, read by hand: sqlc knows no Citus catalog.
	rows, err := pool.Query(ctx, `
		SELECT p.logicalrelid::regclass::text, p.partmethod = 'n', s.shardminvalue, shard_name(p.logicalrelid, s.shardid),
		       (SELECT j.shardid FROM pg_dist_shard j
		        WHERE j.logicalrelid = 'jobs'::regclass AND j.shardminvalue = s.shardminvalue)
		FROM pg_dist_partition p JOIN pg_dist_shard s USING (logicalrelid)
		WHERE (p.partmethod = 'n'
		       OR p.colocationid = (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = 'jobs'::regclass))
		  AND NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = p.logicalrelid)`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[int64]shardTableNames, len(jobsShards))
	for _, id := range jobsShards {
		out[id] = shardTableNames{}
	}
	reference := shardTableNames{}
	for rows.Next() {
		var table, rel string
		var isReference bool
		var minValue *string
		var jobsShard *int64
		if err := rows.Scan(&table, &isReference, &minValue, &rel, &jobsShard); err != nil {
			return nil, err
		}
		switch {
		case isReference:
			reference[table] = rel
		case jobsShard != nil && out[*jobsShard] != nil:
			out[*jobsShard][table] = rel
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for id, names := range out {
		if names["jobs"] == "" {
			return nil, fmt.Errorf("pg: no shard of jobs has id %d in the citus metadata", id)
		}
		for t, rel := range reference {
			names[t] = rel
		}
	}
	return out, nil
}
