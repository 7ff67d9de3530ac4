package pg_test

import (
	"context"
	"testing"

	"github.com/gendurable/gendurable/internal/pg"
)

// Bulk cancel and retry by filter on Citus: a router statement per shard, in turn, each
// batch taking at most its limit, until no matching job is left (the plain statements
// cannot run there: a recursion over families and a join on the key across shards).
func TestCitusBulkCancelAndRetryByFilter(t *testing.T) {
	t.Parallel()
	citusOnly(t)
	db := citusDBWithHandler(t)
	ctx := context.Background()
	for range 10 { // each call lands on the process's next shard
		items := make([]pg.JobInsert, 10)
		for i := range items {
			items[i] = pg.JobInsert{Queue: "bulk", Handler: "h"}
		}
		if _, err := db.JobInsertMany(ctx, items); err != nil {
			t.Fatal(err)
		}
		if _, err := db.JobInsertMany(ctx, []pg.JobInsert{{Queue: "other", Handler: "h"}}); err != nil {
			t.Fatal(err)
		}
	}
	shards, err := db.QueryInt(ctx, `SELECT count(DISTINCT get_shard_id_for_distribution_column('jobs', placement)) FROM jobs WHERE queue = 'bulk'`)
	if err != nil || shards < 5 {
		t.Fatalf("the jobs are on %d shards (%v), want them spread", shards, err)
	}
	queue := "bulk"
	for _, action := range []struct {
		name   string
		run    func() (pg.BulkChanged, error)
		status string
	}{
		{"cancel", func() (pg.BulkChanged, error) { return db.JobCancelMany(ctx, pg.JobFilter{Queue: &queue}, 30) }, "cancelled"},
		{"retry", func() (pg.BulkChanged, error) { return db.JobRetryMany(ctx, pg.JobFilter{Queue: &queue}, 30) }, "runnable"},
	} {
		total, batches := 0, 0
		for more := true; more; batches++ {
			if batches > 10 {
				t.Fatalf("%s: still more after %d batches", action.name, batches)
			}
			b, err := action.run()
			if err != nil {
				t.Fatalf("%s: %v", action.name, err)
			}
			if b.Changed > 30 {
				t.Fatalf("%s: a batch of 30 changed %d", action.name, b.Changed)
			}
			total, more = total+b.Changed, b.More
		}
		if total != 100 || batches != 4 {
			t.Fatalf("%s: %d jobs in %d batches, want 100 in 4", action.name, total, batches)
		}
		rows, err := db.QueryStrings(ctx, `SELECT queue, status, count(*)::text FROM jobs GROUP BY 1, 2 ORDER BY 1, 2`)
		if err != nil || len(rows) != 2 || rows[0][1] != action.status || rows[0][2] != "100" || rows[1][1] != "runnable" {
			t.Fatalf("%s: jobs by queue and status %v (%v), want the 100 of bulk %s and the other queue untouched", action.name, rows, err, action.status)
		}
	}
}
