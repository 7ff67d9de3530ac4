package pg_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// A batch of a bulk action whose filter matches the oldest jobs reads about `limit`
// rows of jobs, not the table: no plan node of JobCancelMany or JobRetryMany reads more
// than 2 × limit + 2 rows (half the rows it passes are of the other action's statuses)
// with 100 000 jobs behind the matching ones, also under a forced generic plan, and the
// retry's live-key check rides jobs_live_key.
func TestBulkBatchReadsAboutTheLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// One connection: the generic plans below are prepared on it.
	db := pgtest.Open(t, pgtest.NewDatabase(t), pg.Options{MaxConns: 1})
	// 40 000 keyed jobs of queue bulk, runnable and failed in turn, then 100 000 others.
	if _, err := db.Exec(ctx, `INSERT INTO handlers (name, url, secret) VALUES ('h', 'http://example.test/', 'whsec_x')`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO jobs (queue, handler, max_attempts, status, finished_at, key)
		SELECT 'bulk', 'h', 5, CASE WHEN i % 2 = 0 THEN 'runnable' ELSE 'failed' END,
		       CASE WHEN i % 2 = 1 THEN now() END, 'k' || i
		FROM generate_series(1, 40000) i`); err != nil {
		t.Fatal(err)
	}
	seedJobs(t, db, "other", 100_000, "")
	queue := "bulk"
	statuses := []string{"runnable"}
	for _, limit := range []int{10, 100, 1000} {
		for name, args := range map[string][]any{
			// $n order of the generated statements (dbsqlc's Params).
			"JobCancelMany": {limit, statuses, &queue, nil, nil, nil, nil},
			"JobRetryMany":  {nil, &queue, nil, nil, nil, nil, limit},
		} {
			raw, err := db.ExplainAnalyze(ctx, pg.Statement(name), args...)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			checkBulkPlan(t, name+" limit "+strconv.Itoa(limit), raw, limit)
		}
	}
	if _, err := db.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	for name, prepared := range map[string]struct{ types, execute string }{
		"JobCancelMany": {"(int, text[], text, text, timestamptz, timestamptz, text)", "(100, '{runnable}', 'bulk', NULL, NULL, NULL, NULL)"},
		"JobRetryMany":  {"(text[], text, text, timestamptz, timestamptz, text, int)", "(NULL, 'bulk', NULL, NULL, NULL, NULL, 100)"},
	} {
		if _, err := db.Exec(ctx, "PREPARE "+name+prepared.types+" AS "+pg.Statement(name)); err != nil {
			t.Fatal(err)
		}
		raw, err := db.ExplainAnalyze(ctx, "EXECUTE "+name+prepared.execute)
		if err != nil {
			t.Fatal(err)
		}
		checkBulkPlan(t, name+" (generic plan) limit 100", raw, 100)
	}
}

// checkBulkPlan fails when a plan scans jobs sequentially or reads more than 2 × limit + 2
// of its rows in a node, or when a retry's live-key check does not ride jobs_live_key.
func checkBulkPlan(t *testing.T, what string, raw []byte, limit int) {
	t.Helper()
	plan, err := pgtest.ParsePlan(raw)
	if err != nil {
		t.Fatal(err)
	}
	read := plan.MaxRowsRead("jobs")
	t.Logf("%s: at most %.0f rows of jobs read by one node (140 000 jobs)", what, read)
	if strings.HasPrefix(what, "JobRetryMany") && !plan.Uses("jobs_live_key") {
		t.Fatalf("%s: the live-key check does not ride jobs_live_key:\n%s", what, raw)
	}
	if plan.HasSeqScan("jobs") || read > float64(2*limit+2) {
		t.Fatalf("%s: a plan node read %.0f rows of jobs (seq scan: %v):\n%s", what, read, plan.HasSeqScan("jobs"), raw)
	}
}
