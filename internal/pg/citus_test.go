package pg_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// citusOnly skips t outside a Citus run (TEST_CITUS=1, make test-citus).
func citusOnly(t *testing.T) {
	t.Helper()
	if !pgtest.Citus() {
		t.Skip("a Citus test: TEST_CITUS=1 (make test-citus)")
	}
}

// citusDBWithHandler is a database of its own on the Citus cluster with handler "h"
// registered (its URL is never called: these tests claim and write, they do not dispatch).
func citusDBWithHandler(t *testing.T) *pg.DB {
	t.Helper()
	db := pgtest.NewDB(t)
	if _, err := db.HandlerUpsert(context.Background(), pg.HandlerUpsert{Name: "h", URL: "http://127.0.0.1:1/"}); err != nil {
		t.Fatal(err)
	}
	return db
}

// The migrations distribute the schema on a Citus coordinator: the job tables hashed by
// placement and colocated, the small tables copied to every node (docs/citus.md).
func TestCitusMigrationsDistributeTheSchema(t *testing.T) {
	t.Parallel()
	citusOnly(t)
	db := pgtest.NewDB(t)
	ctx := context.Background()
	if !db.Citus() {
		t.Fatal("the database is not detected as Citus")
	}
	rows, err := db.QueryStrings(ctx, `SELECT logicalrelid::text, partmethod::text, coalesce(column_to_column_name(logicalrelid, partkey), ''),
		colocationid::text FROM pg_dist_partition ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, r := range rows {
		got[r[0]] = r[1:]
	}
	for _, table := range []string{"jobs", "signals", "steps", "idempotency_keys", "rate_buckets"} {
		r, ok := got[table]
		if !ok || r[0] != "h" || r[1] != "placement" {
			t.Errorf("%s: want hash-distributed by placement, got %v", table, r)
			continue
		}
		if r[2] != got["jobs"][2] {
			t.Errorf("%s is not colocated with jobs: colocation %s, jobs %s", table, r[2], got["jobs"][2])
		}
	}
	for _, table := range []string{"handlers", "queues", "rate_limits", "gates", "schedules", "api_keys", "placement_layout"} {
		if r, ok := got[table]; !ok || r[0] != "n" {
			t.Errorf("%s: want a reference table, got %v", table, r)
		}
	}
	n, err := db.QueryInt(ctx, `SELECT count(DISTINCT nodeport) FROM citus_shards WHERE table_name = 'jobs'::regclass`)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("jobs' shards are on %d nodes, want the 2 workers", n)
	}
	if again, err := db.Migrate(ctx); err != nil || len(again) != 0 {
		t.Fatalf("a second Migrate: applied %v, %v", again, err)
	}
	if p := pg.PlacementOfKey("user-7"); p < 0 || p >= pg.Placements {
		t.Fatalf("PlacementOfKey out of range: %d", p)
	}
}

// gendurable_placement_of_key (migrations/citus, for gendurable_enqueue) answers what the
// server's PlacementOfKey does, for keys of every kind of byte.
func TestCitusPlacementOfKeyInSQL(t *testing.T) {
	t.Parallel()
	citusOnly(t)
	db := pgtest.NewDB(t)
	keys := []string{"", "a", "user-7", "order:2026-12-03/42", "ключ", "日本語のキー", "emoji 🎉", strings.Repeat("x", 512)}
	for i := range 200 {
		keys = append(keys, fmt.Sprintf("tenant-%d", i))
	}
	for _, key := range keys {
		got, err := db.QueryInt(context.Background(), `SELECT gendurable_placement_of_key($1)`, key)
		if err != nil {
			t.Fatal(err)
		}
		if want := pg.PlacementOfKey(key); got != int64(want) {
			t.Fatalf("placement of %q: %d in SQL, %d in Go", key, got, want)
		}
	}
}

// gendurable_enqueue on Citus writes each job at the placement of its key (so that the
// server finds it by key) and its id carries the placement; a rate limit the job does not
// live with is named (rate_placement).
func TestCitusSQLEnqueuePlacesTheJob(t *testing.T) {
	t.Parallel()
	citusOnly(t)
	db := citusDBWithHandler(t)
	ctx := context.Background()
	id, err := db.QueryInt(ctx, `SELECT gendurable_enqueue('h', '{"n": 1}', '{"key": "user-7"}')`)
	if err != nil {
		t.Fatal(err)
	}
	if id%pg.Placements != int64(pg.PlacementOfKey("user-7")) {
		t.Fatalf("job %d: placement %d, want the key's %d", id, id%pg.Placements, pg.PlacementOfKey("user-7"))
	}
	held, err := db.JobGetLiveByKey(ctx, "user-7")
	if err != nil || held.ID != id {
		t.Fatalf("the key's job: %+v %v, want %d", held, err, id)
	}
	again, err := db.QueryInt(ctx, `SELECT gendurable_enqueue('h', '{"n": 2}', '{"key": "user-7"}')`)
	if err != nil || again != id {
		t.Fatalf("a second enqueue of the live key: %d %v, want %d", again, err, id)
	}
	// A rate-limited job lives at its bucket's placement, the bucket minted with it; a job
	// drawing from two buckets is refused.
	if _, err := db.RateLimitUpsert(ctx, "api", 1, 5); err != nil {
		t.Fatal(err)
	}
	rated, err := db.QueryInt(ctx, `SELECT gendurable_enqueue('h', '{}', '{"rate_limit": {"name": "api", "key": "c7"}}')`)
	if err != nil || rated%pg.Placements != int64(pg.RateBucketPlacement("api", "c7")) {
		t.Fatalf("a rate-limited job: %d %v, want it at the bucket's placement %d", rated, err, pg.RateBucketPlacement("api", "c7"))
	}
	if n, err := db.QueryInt(ctx, `SELECT count(*) FROM rate_buckets WHERE name = 'api' AND key = 'c7' AND placement = $1`,
		pg.RateBucketPlacement("api", "c7")); err != nil || n != 1 {
		t.Fatalf("the bucket minted by the enqueue: %d %v", n, err)
	}
	// Beside a concurrency key, the job lives at the concurrency key's placement and names
	// its bucket's (a remote bucket), minted there.
	keyed, err := db.QueryInt(ctx, `SELECT gendurable_enqueue('h', '{}', '{"concurrency_key": "acct-9", "rate_limit": {"name": "api", "key": "c8"}}')`)
	if err != nil || keyed%pg.Placements != int64(pg.PlacementOfKey("acct-9")) {
		t.Fatalf("a rate limit beside a concurrency key: %d %v, want the job at the concurrency key's placement %d", keyed, err,
			pg.PlacementOfKey("acct-9"))
	}
	if n, err := db.QueryInt(ctx, `SELECT (SELECT count(*) FROM jobs j WHERE j.id = $1 AND j.rate_placement = $2)
		+ (SELECT count(*) FROM rate_buckets b WHERE b.name = 'api' AND b.key = 'c8' AND b.placement = $2)`,
		keyed, pg.RateBucketPlacement("api", "c8")); err != nil || n != 2 {
		t.Fatalf("the job names its bucket's placement, where the bucket is minted: %d %v", n, err)
	}
	// Two rate limits: the job at its first bucket's placement, naming it (its claimer
	// debits both buckets, or neither).
	two, err := db.QueryInt(ctx, `SELECT gendurable_enqueue('h', '{}', '{"rate_limits": [{"name": "api", "key": "y"}, {"name": "api", "key": "x"}]}')`)
	if err != nil || two%pg.Placements != int64(pg.RateBucketPlacement("api", "y")) {
		t.Fatalf("two rate limits: %d %v, want the job at its first bucket's placement %d", two, err, pg.RateBucketPlacement("api", "y"))
	}
	if n, err := db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE id = $1 AND rate_placement = $2 AND extra_rate_limits IS NOT NULL`,
		two, pg.RateBucketPlacement("api", "y")); err != nil || n != 1 {
		t.Fatalf("the job with two limits names its first bucket's placement: %d %v", n, err)
	}
}
