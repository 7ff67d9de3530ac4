package pg_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// The outcome statement is linear in its batch: for 256 outcomes of each kind (done,
// next, await, retry, fail, and spawn with a child each) no scan of the plan, over all
// its loops, reads more than twice the batch. A join back to the batch's records from
// the updated rows was a nested loop rescanning them per row (256 × 256 for a batch of
// `next`: 4 of the statement's 12 ms).
func TestOutcomeBatchReadsEachRecordOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const batch = 256
	db := pgtest.Open(t, pgtest.NewDatabase(t), pg.Options{MaxConns: 1})
	kinds := []string{pg.KindDone, pg.KindNext, pg.KindAwait, pg.KindRetry, pg.KindFail, pg.KindSpawn}
	seedJobs(t, db, "q", batch*len(kinds), "")
	hour := int64(time.Hour / time.Millisecond)
	for _, kind := range kinds {
		claimed, err := db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: "q", Limit: batch, LeaseTTL: time.Minute, Owner: "t", SignalCap: 10})
		if err != nil || len(claimed) != batch {
			t.Fatalf("claimed %d (%v)", len(claimed), err)
		}
		recs := make([]pg.OutcomeRecord, len(claimed))
		for i, c := range claimed {
			r := pg.OutcomeRecord{ID: c.ID, Token: c.LeaseToken, Kind: kind, Label: kind}
			switch kind {
			case pg.KindNext:
				r.State, r.DelayMS = json.RawMessage(`{"n":1}`), &hour
			case pg.KindRetry:
				r.DelayMS, r.Error = &hour, json.RawMessage(`{"message":"again"}`)
			case pg.KindFail:
				r.Error = json.RawMessage(`{"message":"no"}`)
			case pg.KindSpawn:
				r.Children = json.RawMessage(fmt.Sprintf(`[{"handler": "h", "queue": "kids", "input": {"i": %d}}]`, i))
			}
			recs[i] = r
		}
		raw, err := db.ExplainAnalyze(ctx, pg.Statement("JobApplyOutcomes"), pg.OutcomeArgs(recs)...)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := pgtest.ParsePlan(raw)
		if err != nil {
			t.Fatal(err)
		}
		most, where := plan.LargestRead()
		t.Logf("%s: the largest scan reads %.0f rows (%s) for %d outcomes", kind, most, where, batch)
		if most > 2*batch {
			t.Fatalf("%s: %s reads %.0f rows for %d outcomes:\n%s", kind, where, most, batch, raw)
		}
		if kind == pg.KindSpawn { // (EXPLAIN ANALYZE changed nothing: it ran in a transaction rolled back)
			if applied, err := db.JobApplyOutcomes(ctx, recs, false); err != nil || len(applied) != batch {
				t.Fatalf("spawns: %d applied (%v)", len(applied), err)
			}
		}
	}
	if n, err := db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE queue = 'kids'`); err != nil || n != batch {
		t.Fatalf("%d children spawned (%v), want %d", n, err, batch)
	}
}
