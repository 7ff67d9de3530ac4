package pg

import (
	"context"
	"encoding/json"
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
