package pg

import (
	"context"

	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// replannedStatements are planned at each execution instead of once per connection (a
// named prepared statement under plan_cache_mode=force_generic_plan, db.go): statements
// heavy enough that planning costs them little, whose best plan follows the size of the
// tables. A plan cached on a connection opened while jobs was empty kept the batch
// insert's dedup branch a nested loop over every live job (TestBatchInsertPlanFollowsTheTable).
var replannedStatements = map[string]bool{
	dbsqlc.JobInsertMany: true,
}

// replanning sends the replanned statements as unnamed statements (parsed, planned and
// run in one round trip: pgx.QueryExecModeExec) and every other one as it is.
type replanning struct{ dbsqlc.DBTX }

func (r replanning) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if replannedStatements[sql] {
		args = append([]any{pgx.QueryExecModeExec}, args...)
	}
	return r.DBTX.Query(ctx, sql, args...)
}

func (r replanning) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if replannedStatements[sql] {
		args = append([]any{pgx.QueryExecModeExec}, args...)
	}
	return r.DBTX.QueryRow(ctx, sql, args...)
}

func (r replanning) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if replannedStatements[sql] {
		args = append([]any{pgx.QueryExecModeExec}, args...)
	}
	return r.DBTX.Exec(ctx, sql, args...)
}

// replanGrowth is how many times larger jobs must be than when the pool's plans were made
// before ReplanIfGrown reopens its connections (and replanGrowthFloor the least size, in
// pages, that counts).
const (
	replanGrowth      = 4
	replanGrowthFloor = 64
)

// ReplanIfGrown reopens the pool's connections when jobs has grown replanGrowth-fold
// since they were opened (or last reopened), so that every statement is planned again for
// the table's size: each connection plans a statement once (force_generic_plan), and a
// plan made while jobs was nearly empty reads the whole table (the pick: a sequential
// scan of every row instead of a jobs_pick range; TestPlansFollowTheJobsTableGrowth).
// Connections in use are closed when they are returned. Cheap: one catalog read.
func (db *DB) ReplanIfGrown(ctx context.Context) (grown bool, pages int64, err error) {
	pages, err = db.q.JobTablePages(ctx)
	if err != nil {
		return false, 0, translate(err)
	}
	planned := db.plannedPages.Load()
	if pages < replanGrowthFloor || pages < replanGrowth*max(planned, 1) {
		return false, pages, nil
	}
	if !db.plannedPages.CompareAndSwap(planned, pages) {
		return false, pages, nil // another caller reset the pool meanwhile
	}
	db.pool.Reset()
	return true, pages, nil
}
