package pg_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// On Citus a fairness key places its jobs (docs/citus.md, "Fair share"): through the API
// and through gendurable_enqueue, every job of a key lives at FairnessPlacement(key), a
// key beside it is displaced (held from its own placement, one live job per key), and the
// default key "" places nothing (its jobs spread over the shards as unkeyed jobs do). So
// is a debounce key beside it. A fairness key beside what places a job elsewhere (a
// concurrency key, a rate limit) is refused, writing nothing.
func TestCitusFairnessKeyPlacesItsJobs(t *testing.T) {
	citusOnly(t)
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	fairQueue(t, db, "fair")
	insertFor(t, db, "fair", str("acme"), 5)
	for range 8 { // a batch's jobs without a key go to one shard, the next batch's to the next
		insertFor(t, db, "fair", nil, 8)
	}
	if _, err := db.QueryInt(ctx, `SELECT gendurable_enqueue('h', '{}', '{"queue": "fair", "fairness_key": "acme"}')`); err != nil {
		t.Fatal(err)
	}
	rows, err := db.QueryStrings(ctx, `SELECT placement::text, count(*)::text FROM jobs WHERE fairness_key = 'acme' GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	if want := strconv.Itoa(pg.FairnessPlacement("acme")); len(rows) != 1 || rows[0][0] != want || rows[0][1] != "6" {
		t.Fatalf("the jobs of key acme by placement: %v; want all 6 at %s", rows, want)
	}
	spread, err := db.QueryInt(ctx, `SELECT count(DISTINCT placement) FROM jobs WHERE fairness_key = ''`)
	if err != nil || spread < 4 {
		t.Fatalf("8 batches of the default key's jobs are at %d placements (%v); want them spread", spread, err)
	}

	// A key beside a fairness key: displaced, still one live job per key.
	keyed := []pg.JobInsert{{Queue: "fair", Handler: "h", FairnessKey: str("acme"), Key: str("order-1")}}
	first, err := db.JobInsertMany(ctx, keyed)
	if err != nil {
		t.Fatal(err)
	}
	again, err := db.JobInsertMany(ctx, keyed)
	if err != nil || !again[0].Deduplicated || again[0].ID != first[0].ID {
		t.Fatalf("the same key again: %+v (%v); want job %d", again, err, first[0].ID)
	}
	if got := int(first[0].ID % pg.Placements); got != pg.FairnessPlacement("acme") {
		t.Fatalf("a keyed job of acme lives at %d, want the fairness key's %d", got, pg.FairnessPlacement("acme"))
	}
	if live, err := db.JobGetLiveByKey(ctx, "order-1"); err != nil || live.ID != first[0].ID {
		t.Fatalf("the live job of key order-1: %v (%v)", live.ID, err)
	}

	// A debounce key beside a fairness key: displaced too, the key's one pending job found
	// at the fairness key's placement, through the API and SQL alike.
	debounced := []pg.JobInsert{{Queue: "fair", Handler: "h", FairnessKey: str("acme"),
		Debounce: &pg.Debounce{Key: "sync-acme", Period: time.Hour}}}
	made, err := db.JobInsertMany(ctx, debounced)
	if err != nil || made[0].Debounced {
		t.Fatalf("a debounced job of acme: %+v (%v)", made, err)
	}
	if got := int(made[0].ID % pg.Placements); got != pg.FairnessPlacement("acme") {
		t.Fatalf("a debounced job of acme lives at %d, want the fairness key's %d", got, pg.FairnessPlacement("acme"))
	}
	if again, err := db.JobInsertMany(ctx, debounced); err != nil || !again[0].Debounced || again[0].ID != made[0].ID {
		t.Fatalf("the same debounce key again: %+v (%v); want job %d", again, err, made[0].ID)
	}
	if id, err := db.QueryInt(ctx, `SELECT gendurable_enqueue('h', '{}',
		'{"queue": "fair", "fairness_key": "acme", "debounce": {"key": "sync-acme", "period": "1h"}}')`); err != nil || id != made[0].ID {
		t.Fatalf("gendurable_enqueue of the same debounce key: job %d (%v), want %d", id, err, made[0].ID)
	}
	if again, err := db.JobInsertMany(ctx, []pg.JobInsert{{Queue: "fair", Handler: "h",
		Debounce: &pg.Debounce{Key: "sync-acme", Period: time.Hour}}}); err != nil || again[0].ID != made[0].ID {
		t.Fatalf("the debounce key without a fairness key: %+v (%v); want job %d", again, err, made[0].ID)
	}

	// Refused beside what places a job elsewhere, through the API and SQL alike.
	if _, err := db.RateLimitUpsert(ctx, "slow", 1, 1); err != nil {
		t.Fatal(err)
	}
	before, err := db.QueryInt(ctx, `SELECT count(*) FROM jobs`)
	if err != nil {
		t.Fatal(err)
	}
	for name, it := range map[string]pg.JobInsert{
		"concurrency key": {Queue: "plain", Handler: "h", FairnessKey: str("acme"), ConcurrencyKey: str("k")},
		"rate limit":      {Queue: "plain", Handler: "h", FairnessKey: str("acme"), RateLimit: str("slow")},
	} {
		_, err := db.JobInsertMany(ctx, []pg.JobInsert{it})
		var refused *pg.InsertRefusedError
		if !errors.As(err, &refused) || len(refused.Problems) != 1 || refused.Problems[0].Field != "fairness_key" {
			t.Errorf("a fairness key with a %s: %v; want a refusal naming fairness_key", name, err)
		}
	}
	for _, options := range []string{
		`{"fairness_key": "acme", "concurrency_key": "k"}`,
		`{"fairness_key": "acme", "rate_limit": {"name": "slow"}}`,
	} {
		_, err := db.QueryInt(ctx, `SELECT gendurable_enqueue('h', '{}', $1::jsonb)`, options)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "22023" || pgErr.ColumnName != "fairness_key" ||
			!strings.Contains(pgErr.Message, "places its jobs") {
			t.Errorf("gendurable_enqueue %s: %v; want 22023 on fairness_key", options, err)
		}
	}
	if after, err := db.QueryInt(ctx, `SELECT count(*) FROM jobs`); err != nil || after != before {
		t.Fatalf("the refused inserts wrote %d jobs (%v)", after-before, err)
	}
}

// A key's cap holds on Citus when many processes claim at once: the fair claims of a
// shard are serialised by its position's lock, so each sees the steps the others took.
// Eight processes, each its own pool, claim at once, twice over: the key capped at 3 has
// exactly 3 steps executing, and the uncapped key what the claims left.
func TestCitusFairCapHoldsUnderConcurrentClaims(t *testing.T) {
	citusOnly(t)
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	db := pgtest.Open(t, url, pg.Options{})
	fairQueue(t, db, "fair")
	insertFor(t, db, "fair", str("capped"), 100)
	insertFor(t, db, "fair", str("free"), 100)
	if _, err := db.FairnessKeyPut(ctx, "fair", "capped", nil, ptr(3)); err != nil {
		t.Fatal(err)
	}
	const processes = 8
	dbs := make([]*pg.DB, processes)
	for i := range dbs {
		dbs[i] = pgtest.Open(t, url, pg.Options{MaxConns: 2})
	}
	for round := range 2 {
		var start, done sync.WaitGroup
		start.Add(1)
		errs := make(chan error, processes)
		for i, pdb := range dbs {
			done.Add(1)
			go func() {
				defer done.Done()
				start.Wait()
				pdb.WarmShards("fair")
				_, err := pdb.JobClaimFair(ctx, pg.FairClaimParams{Slots: 1000, JobClaimParams: pg.JobClaimParams{
					Queue: "fair", Limit: 4, LeaseTTL: time.Minute, Owner: "p" + strconv.Itoa(i), SignalCap: 100}})
				errs <- err
			}()
		}
		start.Done()
		done.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		capped, err := db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE fairness_key = 'capped' AND status = 'executing'`)
		if err != nil {
			t.Fatal(err)
		}
		free, err := db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE fairness_key = 'free' AND status = 'executing'`)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: capped %d executing, free %d", round+1, capped, free)
		if capped != 3 {
			t.Fatalf("round %d: the key capped at 3 has %d steps executing after %d concurrent claims", round+1, capped, processes)
		}
		if free == 0 {
			t.Fatalf("round %d: the uncapped key got nothing", round+1)
		}
	}
}

// gendurable_enqueue refuses to run on a worker node, where a key's lock would exclude
// nobody (the inserts of keyed jobs take it on the coordinator), and writes nothing.
func TestCitusSQLEnqueueRefusedOnAWorker(t *testing.T) {
	citusOnly(t)
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	fairQueue(t, db, "fair")
	on, err := db.QueryShardStrings(ctx, 0, `SELECT citus_is_coordinator()::text`)
	if err != nil || len(on) != 1 || on[0][0] != "false" {
		t.Fatalf("shard 0's statements run where citus_is_coordinator() is %v (%v); want a worker", on, err)
	}
	_, err = db.QueryShardStrings(ctx, 0, `SELECT gendurable_enqueue('h', '{}', '{"key": "order-1"}')::text`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "0A000" || !strings.Contains(pgErr.Message, "coordinator") {
		t.Fatalf("gendurable_enqueue on a worker: %v; want 0A000 naming the coordinator", err)
	}
	if n, err := db.QueryInt(ctx, `SELECT count(*) FROM jobs`); err != nil || n != 0 {
		t.Fatalf("the refused call wrote %d jobs (%v)", n, err)
	}
	if _, err := db.QueryInt(ctx, `SELECT gendurable_enqueue('h', '{}', '{"key": "order-1"}')`); err != nil {
		t.Fatalf("gendurable_enqueue on the coordinator: %v", err)
	}
}
