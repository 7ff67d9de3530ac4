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
