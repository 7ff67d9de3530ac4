package pg

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// OutcomeArgs are the arguments of JobApplyOutcomes for recs, for tests that EXPLAIN it.
func OutcomeArgs(recs []OutcomeRecord) []any {
	b, err := json.Marshal(recs)
	if err != nil {
		panic(err)
	}
	return []any{b}
}

// InsertArgs are the positional arguments of JobInsertMany for items, in its $n order.
func InsertArgs(items []JobInsert) []any {
	p := insertArrays(items)
	p.IdempotencyWindowMs = DefaultIdempotencyWindow.Milliseconds()
	return insertManyArgs(p)
}

// JobInsertManyGeneral inserts items with the general statement (JobInsertMany) whatever
// they are, for tests that compare it with the plain one.
func (db *DB) JobInsertManyGeneral(ctx context.Context, items []JobInsert) ([]JobInserted, error) {
	return db.jobInsertManyWith(ctx, items, JobInsertOptions{}, false)
}

// StatementNames lists the statements of the table.
func StatementNames() []string {
	var names []string
	for name := range statements {
		names = append(names, name)
	}
	return names
}

// QueryJSON reads the one jsonb column of sql's rows as json.RawMessage, and as a
// *json.RawMessage, through the pool's codecs.
func (db *DB) QueryJSON(ctx context.Context, sql string) (raw []json.RawMessage, ptrs []*json.RawMessage, err error) {
	rows, err := db.pool.Query(ctx, sql)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var r json.RawMessage
		var p *json.RawMessage
		if err := rows.Scan(&r); err != nil {
			return nil, nil, err
		}
		if err := rows.Scan(&p); err != nil {
			return nil, nil, err
		}
		raw, ptrs = append(raw, r), append(ptrs, p)
	}
	return raw, ptrs, rows.Err()
}

// JobApplyOutcomesGeneral writes recs with the general outcome statement whatever they
// are, for tests that compare it with the plain one.
func (db *DB) JobApplyOutcomesGeneral(ctx context.Context, recs []OutcomeRecord) ([]OutcomeApplied, error) {
	return db.jobApplyOutcomes(ctx, recs, false)
}

// CitusShardPlacements answers the placements of shard i of a Citus database.
func CitusShardPlacements(ctx context.Context, db *DB, i int) ([]int, error) {
	l, err := db.layout(ctx)
	if err != nil {
		return nil, err
	}
	return l.shardPlacements(i), nil
}

// CitusWithPlacements is citusWithPlacements.
var CitusWithPlacements = citusWithPlacements

// RewriteTables is rewriteTables.
func RewriteTables(sql string, names map[string]string) string { return rewriteTables(sql, names) }

// CitusShardQuerier names what runs shard i's statements: "shard tables", "worker" (the
// distributed tables on the shard's worker) or "coordinator".
func (db *DB) CitusShardQuerier(ctx context.Context, i int) (string, error) {
	l, err := db.layout(ctx)
	if err != nil {
		return "", err
	}
	switch q := db.shardQuerier(l, i).(type) {
	case shardTables:
		return "shard tables", nil
	case *pgxpool.Pool:
		if q == db.pool {
			return "coordinator", nil
		}
		return "worker", nil
	default:
		return fmt.Sprintf("%T", q), nil
	}
}

// CitusShardTableNames answers shard i's table names on its worker (nil: not read).
func (db *DB) CitusShardTableNames(ctx context.Context, i int) (map[string]string, error) {
	l, err := db.layout(ctx)
	if err != nil {
		return nil, err
	}
	return l.shardTableNames(i), nil
}

// QueryShardStrings runs sql on shard i as the server runs its statements there (on the
// shard's tables, guarded, with CitusRouteShards) and answers its rows as text.
func (db *DB) QueryShardStrings(ctx context.Context, i int, sql string, args ...any) ([][]string, error) {
	l, err := db.layout(ctx)
	if err != nil {
		return nil, err
	}
	var out [][]string
	err = db.onShard(ctx, l, i, func(ctx context.Context, q shardQuerier) error {
		out = nil
		rows, err := q.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				return err
			}
			row := make([]string, len(vals))
			for k, v := range vals {
				row[k] = fmt.Sprint(v)
			}
			out = append(out, row)
		}
		return rows.Err()
	})
	return out, err
}

// CitusShardsMovedAway counts the statements on a shard's tables refused because the
// shard had moved (and run through the coordinator instead).
func (db *DB) CitusShardsMovedAway() int64 { return db.shardsMovedAway.Load() }

// WarmShards forgets every cold mark of queue's claims on Citus (a no-op on plain
// PostgreSQL), as a wake-up naming every shard would: for tests whose claims come back
// short on purpose (at the keys' shares) and claim again before any outcome.
func (db *DB) WarmShards(queue string) {
	db.warmth.warm(queue)
}
