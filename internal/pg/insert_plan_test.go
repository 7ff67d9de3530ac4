package pg_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
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
	if _, err := db.JobInsertManyGeneral(ctx, items); err != nil {
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

// Both batch inserts (JobInsertMany and JobInsertPlain) stay linear under a generic plan
// made while the table was empty (a server's connections prepare their statements once,
// and plan_cache_mode is force_generic_plan): prepared and first run on an empty,
// analyzed jobs table, then run with 10 000 items beside 20 000 live jobs, no node of
// the plan reads more than twice the batch over all its loops (the live jobs are not
// read at all: no item has a key). JobInsertMany's dedup branch used to be a semi-join
// from jobs, planned then as a nested loop rescanning the request once per live job
// (10^8 rows compared; 4.4 s where the insert takes 0.17 s); both answer by joining the
// inserted rows to the request by id, which such a plan could make quadratic too.
func TestBatchInsertStaysLinearUnderAPlanMadeWhileEmpty(t *testing.T) {
	t.Parallel()
	// The request's arrays of n items, every optional field absent ('' / 0 / -1 / year 1 / NULL).
	f := func(v, typ string, n int) string { return fmt.Sprintf("array_fill(%s::%s, ARRAY[%d])", v, typ, n) }
	general := func(n int) string {
		return strings.Join([]string{f("'q'", "text", n), f("'h'", "text", n), f("'{}'", "jsonb", n), f("''", "text", n),
			f("-1", "int", n), f("'0001-01-01 00:00:00+00'", "timestamptz", n), f("0", "bigint", n), f("''", "text", n),
			f("''", "text", n), f("''", "text", n), f("0", "int", n), f("0", "int", n), f("0", "bigint", n), f("''", "text", n),
			f("NULL", "jsonb", n), f("''", "text", n), f("0", "bigint", n), f("0", "bigint", n), "NULL", "NULL", "NULL", "86400000", "''"}, ", ")
	}
	// The plain statement as the server sends it: the optional columns as NULL arrays.
	plain := func(n int) string {
		return strings.Join([]string{f("'h'", "text", n), f("'q'", "text", n), f("'{}'", "jsonb", n),
			"NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "''"}, ", ")
	}
	for _, c := range []struct {
		statement, types string
		args             func(n int) string
	}{
		{"JobInsertMany", "text[], text[], jsonb[], text[], int[], timestamptz[], bigint[], text[], text[], text[], int[], int[], " +
			"bigint[], text[], jsonb[], text[], bigint[], bigint[], text[], text[], timestamptz, bigint, text", general},
		{"JobInsertPlain", "text[], text[], jsonb[], int[], timestamptz[], bigint[], int[], text[], bigint[], text[], text[], text", plain},
	} {
		t.Run(c.statement, func(t *testing.T) {
			t.Parallel()
			insertStaysLinear(t, pg.Statement(c.statement), c.types, c.args)
		})
	}
}

// insertStaysLinear prepares statement (of parameter types types) under a generic plan
// on an empty, analyzed jobs table, runs it once with one item, then runs 10 000 items
// beside 20 000 live jobs and fails when a node of the plan reads more than twice the batch.
func insertStaysLinear(t *testing.T, statement, types string, args func(n int) string) {
	ctx := context.Background()
	db := pgtest.Open(t, pgtest.NewDatabase(t), pg.Options{MaxConns: 1})
	if _, err := db.Exec(ctx, `INSERT INTO handlers (name, url, secret) VALUES ('h', 'http://example.test/', 'whsec_x')`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `VACUUM ANALYZE jobs`); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"SET plan_cache_mode = force_generic_plan",
		"PREPARE ins(" + types + ") AS " + statement,
		"EXECUTE ins(" + args(1) + ")", // the generic plan is made here, on an empty table
		`INSERT INTO jobs (queue, handler, max_attempts) SELECT 'q', 'h', 5 FROM generate_series(1, 20000)`} {
		if _, err := db.Exec(ctx, s); err != nil {
			t.Fatalf("%.60s: %v", s, err)
		}
	}
	const batch = 10000
	raw, err := db.ExplainAnalyze(ctx, "EXECUTE ins("+args(batch)+")")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := pgtest.ParsePlan(raw)
	if err != nil {
		t.Fatal(err)
	}
	most, where := plan.LargestRead()
	t.Logf("the largest node reads %.0f rows (%s) for %d items beside 20 000 live jobs", most, where, batch)
	if most > 2*batch {
		t.Fatalf("%s reads %.0f rows for %d items:\n%s", where, most, batch, raw)
	}
}
