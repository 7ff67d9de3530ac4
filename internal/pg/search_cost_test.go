package pg_test

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// The cost of a search by payload at 1 000 000 jobs (docs/performance.md, "Search by
// payload"), with and without a GIN index on jobs.input: a million jobs over ten days
// (one customer in 10 000 per job), a one-day window searched for one customer (about 10
// matches, fewer than a page, so the whole window is read), the window's bounds found by
// JobIDAt; then the same without the window, and the insert cost of the index. Minutes
// of work: run with GENDURABLE_MEASURE_SEARCH=1 (it logs the figures).
func TestSearchByPayloadCostAtAMillionJobs(t *testing.T) {
	if os.Getenv("GENDURABLE_MEASURE_SEARCH") == "" {
		t.Skip("GENDURABLE_MEASURE_SEARCH=1 measures a search at a million jobs")
	}
	ctx := context.Background()
	db := pgtest.NewDB(t)
	exec := func(sql string) time.Duration {
		t.Helper()
		start := time.Now()
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return time.Since(start)
	}
	exec(`INSERT INTO handlers (name, url, secret) VALUES ('h', 'http://127.0.0.1:9/', 'whsec_AAAA')`)
	// Ten days, oldest first: ids grow with created_at, as inserts make them.
	took := exec(`INSERT INTO jobs (queue, handler, status, input, max_attempts, created_at, finished_at, result)
		SELECT 'default', 'h', 'done', jsonb_build_object('customer', 'c-' || (i % 10000), 'n', i, 'note', 'order of the day'),
		       3, now() - interval '10 days' + i * interval '864 milliseconds', now(), jsonb_build_object('ok', true)
		FROM generate_series(1, 1000000) AS i`)
	exec(`VACUUM ANALYZE jobs`)
	t.Logf("1 000 000 jobs inserted in %s", took.Round(time.Millisecond))

	after := time.Now().Add(-3 * 24 * time.Hour)
	before := after.Add(24 * time.Hour)
	search := func(window bool) (time.Duration, int) {
		t.Helper()
		var times []time.Duration
		n := 0
		for range 5 {
			start := time.Now()
			p := pg.JobListParams{InputContains: json.RawMessage(`{"customer": "c-42"}`), Limit: 50}
			if window {
				lo, err := db.JobIDAt(ctx, after.Add(-5*time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				hi, err := db.JobIDAt(ctx, before.Add(5*time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				p.MinID, p.Before, p.CreatedAfter, p.CreatedBefore = &lo, &hi, &after, &before
			}
			rows, err := db.JobList(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			times = append(times, time.Since(start))
			n = len(rows)
		}
		slices.Sort(times)
		return times[len(times)/2], n
	}
	plan := func(window bool) string {
		t.Helper()
		q := `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) SELECT id FROM jobs WHERE input @> '{"customer": "c-42"}'`
		if window {
			q += ` AND created_at >= now() - interval '3 days' AND created_at < now() - interval '2 days'
				AND id >= (SELECT min(id) FROM jobs WHERE created_at >= now() - interval '3 days' - interval '5 minutes')`
		}
		q += ` ORDER BY id DESC LIMIT 50`
		rows, err := db.QueryStrings(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, r := range rows {
			lines = append(lines, r[0])
		}
		return strings.Join(lines, "\n")
	}
	insert := func() time.Duration {
		t.Helper()
		d := exec(`INSERT INTO jobs (queue, handler, input, max_attempts)
			SELECT 'bench', 'h', jsonb_build_object('customer', 'c-' || (i % 10000), 'n', i, 'note', 'order of the day'), 3
			FROM generate_series(1, 100000) AS i`)
		exec(`DELETE FROM jobs WHERE queue = 'bench'`)
		exec(`VACUUM jobs`)
		return d
	}
	wNo, nNo := search(true)
	aNo, _ := search(false)
	insNo := insert()
	t.Logf("no index: a one-day window %s (%d rows), the whole table %s; 100 000 inserts %s", wNo, nNo, aNo, insNo)
	t.Logf("plan without an index, in the window:\n%s", plan(true))
	took = exec(`CREATE INDEX jobs_input_gin ON jobs USING gin (input jsonb_path_ops)`)
	size, err := db.QueryStrings(ctx, `SELECT pg_size_pretty(pg_relation_size('jobs_input_gin'))`)
	if err != nil {
		t.Fatal(err)
	}
	exec(`ANALYZE jobs`)
	wGin, nGin := search(true)
	aGin, _ := search(false)
	insGin := insert()
	t.Logf("GIN (jsonb_path_ops) built in %s, %s: a one-day window %s (%d rows), the whole table %s; 100 000 inserts %s",
		took.Round(time.Millisecond), size[0][0], wGin, nGin, aGin, insGin)
	t.Logf("plan with the index, in the window:\n%s", plan(true))
	if nNo != nGin || nNo == 0 {
		t.Fatalf("the searches found %d and %d rows", nNo, nGin)
	}
}
