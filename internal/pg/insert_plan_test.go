package pg_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// insertPlanNode is a node of EXPLAIN (FORMAT JSON) with the CTE it computes.
type insertPlanNode struct {
	NodeType    string           `json:"Node Type"`
	SubplanName string           `json:"Subplan Name"`
	ActualRows  float64          `json:"Actual Rows"`
	Plans       []insertPlanNode `json:"Plans"`
}

// rowsUnder is the most rows any node below n (n included) returned.
func (n insertPlanNode) rowsUnder() float64 {
	most := n.ActualRows
	for _, c := range n.Plans {
		most = max(most, c.rowsUnder())
	}
	return most
}

// cte returns the top-level node computing CTE name.
func insertCTE(t *testing.T, raw []byte, name string) insertPlanNode {
	t.Helper()
	var top []struct{ Plan insertPlanNode }
	if err := json.Unmarshal(raw, &top); err != nil || len(top) == 0 {
		t.Fatalf("bad plan: %v", err)
	}
	for _, c := range top[0].Plan.Plans {
		if c.SubplanName == "CTE "+name {
			return c
		}
	}
	t.Fatalf("no CTE %s in the plan:\n%s", name, raw)
	return insertPlanNode{}
}

// An insert without debounce (and without several rate limits) stays one statement, and
// its rows never reach the debounce upsert: every node of that CTE returns 0 rows, so
// it costs one filtered pass over the request, not a write, a sort or a probe per job.
func TestInsertPaysNothingForUnusedDebounce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	counter := &pg.StatementCounter{}
	db := pgtest.Open(t, pgtest.NewDatabase(t), pg.Options{Counter: counter})
	seedJobs(t, db, "q", 1000, "")
	items := make([]pg.JobInsert, 1000)
	for i := range items {
		items[i] = pg.JobInsert{Queue: "q", Handler: "h", Input: json.RawMessage(`{"n":1}`)}
	}
	raw, err := db.ExplainAnalyze(ctx, pg.Statement("JobInsertMany"), pg.InsertArgs(items)...)
	if err != nil {
		t.Fatal(err)
	}
	if rows := insertCTE(t, raw, "inserted").ActualRows; rows != 1000 {
		t.Fatalf("the plain insert wrote %.0f rows, want 1000", rows)
	}
	if rows := insertCTE(t, raw, "debounced").rowsUnder(); rows != 0 {
		t.Fatalf("a node of the debounce upsert returned %.0f rows for a batch without debounce:\n%s", rows, raw)
	}
	counter.Reset()
	if _, err := db.JobInsertMany(ctx, items); err != nil {
		t.Fatal(err)
	}
	if got := counter.Snapshot(); got["JobInsertMany"] != 1 || len(got) != 1 {
		t.Fatalf("a batch of 1 000 ran %v, want one JobInsertMany", got)
	}

	// With debounce, the same CTE does the work (the control for the assertion above).
	for i := range items {
		items[i].Debounce = &pg.Debounce{Key: "k", Period: time.Hour}
	}
	raw, err = db.ExplainAnalyze(ctx, pg.Statement("JobInsertMany"), pg.InsertArgs(items)...)
	if err != nil {
		t.Fatal(err)
	}
	if rows := insertCTE(t, raw, "debounced").ActualRows; rows != 1 {
		t.Fatalf("1 000 items of one debounce key upserted %.0f rows, want 1", rows)
	}
}
