package pg_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// Migration 0016 rolls the last 25 hours of an existing history up, with the latency
// buckets Go would have counted (engine.LatencyBucket), leaves older rows out, and drops
// the history's two chart indexes.
func TestMigrationRollsUpTheLastDay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	rollups := schemaBefore(t, db, 16)
	// Durations from 0.4 µs to 90 s; outcomes of every class; one second, two handlers.
	// (The second is read back from the history: a now() of a later statement may be in
	// the next second, which failed this test once in CI.)
	durations := []time.Duration{400 * time.Nanosecond, 3 * time.Microsecond, 999 * time.Microsecond, time.Millisecond,
		7 * time.Millisecond, 250 * time.Millisecond, 90 * time.Second}
	labels := []string{"done", "next", "http_error", "fail", "await", "timeout", "bad_secret"}
	var values []string
	for i, d := range durations {
		values = append(values, fmt.Sprintf("(%d, 'q', 'h%d', '%s', %d)", i+1, i%2, labels[i], d.Microseconds()))
	}
	if _, err := db.Exec(ctx, `INSERT INTO steps (job_id, queue, handler, step, attempt, outcome, started_at, finished_at)
		SELECT v.id, v.queue, v.handler, 0, 1, v.outcome, f - v.us * interval '1 microsecond', f
		FROM (VALUES `+strings.Join(values, ", ")+`) v(id, queue, handler, outcome, us),
		     (SELECT date_trunc('second', now() - interval '1 hour') + interval '0.5 second' AS f) t
		UNION ALL
		SELECT 100, 'q', 'h0', 0, 1, 'done', now() - interval '30 hours', now() - interval '30 hours'`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, rollups.SQL); err != nil {
		t.Fatal(err)
	}
	got, err := db.QueryStrings(ctx, `SELECT handler, ok::text, failed::text, done::text, total::text,
		latency_buckets::text, latency_counts::text,
		(at = (SELECT date_trunc('second', max(s.finished_at)) FROM steps s WHERE s.job_id <> 100))::text
		FROM step_rollups ORDER BY handler`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]int{} // handler → the buckets of its durations
	for i, d := range durations {
		h := fmt.Sprintf("h%d", i%2)
		want[h] = append(want[h], engine.LatencyBucket(d.Truncate(time.Microsecond))) // timestamps hold microseconds
	}
	if len(got) != 2 {
		t.Fatalf("%d rollup rows, want one per handler of the last day: %v", len(got), got)
	}
	for _, row := range got {
		var buckets []string
		for _, b := range want[row[0]] {
			buckets = append(buckets, fmt.Sprint(b))
		}
		wantBuckets := "{" + strings.Join(buckets, ",") + "}"
		if row[5] != wantBuckets || row[7] != "true" {
			t.Fatalf("%s: buckets %s at the right second %s; Go counts %s", row[0], row[5], row[7], wantBuckets)
		}
	}
	// h0: done, http_error, await, bad_secret; h1: next, fail, timeout.
	if g := strings.Join(got[0][1:5], " "); g != "2 1 1 4" {
		t.Fatalf("h0: ok failed done total = %s, want 2 1 1 4", g)
	}
	if g := strings.Join(got[1][1:5], " "); g != "1 1 0 3" {
		t.Fatalf("h1: ok failed done total = %s, want 1 1 0 3", g)
	}
	if n, err := db.QueryInt(ctx, `SELECT count(*) FROM pg_indexes WHERE indexname IN ('steps_queue_finished', 'steps_handler_finished')`); err != nil || n != 0 {
		t.Fatalf("%d chart indexes left on the history (%v)", n, err)
	}
}
