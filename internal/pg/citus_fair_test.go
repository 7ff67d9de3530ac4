package pg_test

import (
	"context"
	"errors"
	"maps"
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
// is a debounce key beside it. A concurrency key places its job before a fairness key
// does (K=1 is exact only where every job of the key lives), and a rate limit beside a
// fairness key is a remote bucket, through the API and SQL alike.
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

	// Beside a concurrency key, the job lives at the concurrency key's placement; beside a
	// rate limit, at the fairness key's, its bucket remote (rate_placement names it).
	if _, err := db.RateLimitUpsert(ctx, "slow", 1, 1); err != nil {
		t.Fatal(err)
	}
	beside := []pg.JobInsert{
		{Queue: "plain", Handler: "h", FairnessKey: str("acme"), ConcurrencyKey: str("k")},
		{Queue: "plain", Handler: "h", FairnessKey: str("acme"), RateLimit: str("slow")},
	}
	inserted, err := db.JobInsertMany(ctx, beside)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, it := range inserted {
		ids = append(ids, it.ID)
	}
	for _, options := range []string{
		`{"queue": "plain", "fairness_key": "acme", "concurrency_key": "k"}`,
		`{"queue": "plain", "fairness_key": "acme", "rate_limit": {"name": "slow"}}`,
	} {
		id, err := db.QueryInt(ctx, `SELECT gendurable_enqueue('h', '{}', $1::jsonb)`, options)
		if err != nil {
			t.Fatalf("gendurable_enqueue %s: %v", options, err)
		}
		ids = append(ids, id)
	}
	bucket := pg.RateBucketPlacement("slow", "")
	for n, id := range ids {
		concurrencyKeyed := n%2 == 0
		wantAt, wantBucket := pg.PlacementOfKey("k"), "none"
		if !concurrencyKeyed {
			wantAt, wantBucket = pg.FairnessPlacement("acme"), strconv.Itoa(bucket)
			if bucket == wantAt {
				wantBucket = "none" // the bucket at the job's own placement: its claim debits it
			}
		}
		row, err := db.QueryStrings(ctx, `SELECT placement::text, coalesce(rate_placement::text, 'none'), fairness_key
			FROM jobs WHERE id = $1`, id)
		if err != nil || len(row) != 1 || row[0][0] != strconv.Itoa(wantAt) || row[0][1] != wantBucket || row[0][2] != "acme" {
			t.Fatalf("job %d (concurrency key: %v): placement, bucket and key %v (%v); want %d, %s, acme",
				id, concurrencyKeyed, row, err, wantAt, wantBucket)
		}
	}
	// In a fair queue a rate limit is refused, as on plain PostgreSQL: its claims apply none.
	_, err = db.JobInsertMany(ctx, []pg.JobInsert{{Queue: "fair", Handler: "h", FairnessKey: str("acme"), RateLimit: str("slow")}})
	var refused *pg.InsertRefusedError
	if !errors.As(err, &refused) || len(refused.Problems) != 1 || refused.Problems[0].Field != "rate_limit" {
		t.Fatalf("a rate limit in a fair queue: %v; want a refusal naming rate_limit", err)
	}
	_, err = db.QueryInt(ctx, `SELECT gendurable_enqueue('h', '{}', '{"queue": "fair", "fairness_key": "acme", "rate_limit": {"name": "slow"}}')`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "22023" || pgErr.ColumnName != "rate_limit" {
		t.Fatalf("gendurable_enqueue of a rate limit in a fair queue: %v; want 22023 on rate_limit", err)
	}
}

// A fair queue's jobs of one fairness key with concurrency keys live at their concurrency
// keys' placements, on several shards (docs/citus.md, "Fair share"): each shard's fair
// claim takes them in the key's turns, K=1 holds for every concurrency key, and the key's
// cap counts its steps on each shard. Claims by three processes at once, each claimed
// step then done, until the queue is drained: nothing is left, no concurrency key ever
// had two steps executing, and no shard more than the cap of the key's.
func TestCitusFairnessKeyBesideConcurrencyKeysDrains(t *testing.T) {
	citusOnly(t)
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	db := pgtest.Open(t, url, pg.Options{})
	fairQueue(t, db, "fair")
	const capOfAcme = 2
	if _, err := db.FairnessKeyPut(ctx, "fair", "acme", nil, ptr(capOfAcme)); err != nil {
		t.Fatal(err)
	}
	var jobs []pg.JobInsert
	concurrencyKeys := map[int]bool{}
	for i := range 60 {
		it := pg.JobInsert{Queue: "fair", Handler: "h", FairnessKey: str("acme")}
		if i%3 != 0 {
			it.ConcurrencyKey = str("account-" + strconv.Itoa(i%7))
			concurrencyKeys[pg.PlacementOfKey(*it.ConcurrencyKey)] = true
		}
		if i%4 == 0 {
			it.FairnessKey = str("other")
		}
		jobs = append(jobs, it)
	}
	if _, err := db.JobInsertMany(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	if placements, err := db.QueryInt(ctx, `SELECT count(DISTINCT placement) FROM jobs WHERE fairness_key = 'acme'`); err != nil || placements < 3 {
		t.Fatalf("the jobs of acme live at %d placements (%v); want its own and its concurrency keys'", placements, err)
	}

	const processes = 3
	dbs := make([]*pg.DB, processes)
	for i := range dbs {
		dbs[i] = pgtest.Open(t, url, pg.Options{MaxConns: 4})
	}
	ok := 200
	for round := 0; ; round++ {
		if round == 200 {
			t.Fatal("the queue did not drain in 200 rounds of claims")
		}
		var wg sync.WaitGroup
		claimed := make([][]pg.ClaimedJob, processes)
		errs := make([]error, processes)
		for i, pdb := range dbs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				pdb.WarmShards("fair")
				claimed[i], errs[i] = pdb.JobClaimFair(ctx, pg.FairClaimParams{Slots: 1000, JobClaimParams: pg.JobClaimParams{
					Queue: "fair", Limit: 8, LeaseTTL: time.Minute, Owner: "p" + strconv.Itoa(i), SignalCap: 100}})
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		// What runs at once after the claims: one step per concurrency key, and no more
		// than the cap of acme's on any shard.
		twice, err := db.QueryStrings(ctx, `SELECT concurrency_key, count(*)::text FROM jobs
			WHERE status = 'executing' AND concurrency_key IS NOT NULL GROUP BY 1 HAVING count(*) > 1`)
		if err != nil || len(twice) > 0 {
			t.Fatalf("round %d: concurrency keys with several steps executing: %v (%v)", round, twice, err)
		}
		overCap, err := db.QueryStrings(ctx, `SELECT get_shard_id_for_distribution_column('jobs', placement)::text, count(*)::text
			FROM jobs WHERE status = 'executing' AND fairness_key = 'acme' GROUP BY 1 HAVING count(*) > $1`, capOfAcme)
		if err != nil || len(overCap) > 0 {
			t.Fatalf("round %d: shards with acme over its cap of %d: %v (%v)", round, capOfAcme, overCap, err)
		}
		var outcomes []pg.OutcomeRecord
		for _, cs := range claimed {
			for _, c := range cs {
				outcomes = append(outcomes, pg.OutcomeRecord{ID: c.ID, Token: c.LeaseToken, Kind: pg.KindDone,
					Label: "done", Attempt: c.Attempt, HTTPStatus: &ok})
			}
		}
		if len(outcomes) > 0 {
			if _, err := db.JobApplyOutcomes(ctx, outcomes, false); err != nil {
				t.Fatal(err)
			}
		}
		left, err := db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE status <> 'done'`)
		if err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			t.Logf("60 jobs of 2 fairness keys over %d concurrency-key placements drained in %d rounds", len(concurrencyKeys), round+1)
			return
		}
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

// A key whose jobs concurrency keys spread over many shards weighs once in the other keys'
// shares of a process's slots, not once a shard (docs/citus.md, "Fair share"). With 100
// slots, a tenant on 24 accounts (a concurrency key each, over many shards on Citus) runs
// one step of each account, and a tenant on its own shard runs its half of the slots, as
// on plain PostgreSQL. Counted once a shard, the spread tenant ran 16 of its 24.
func TestASpreadFairnessKeyKeepsTheSharesOfTheSlots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	fairQueue(t, db, "fair")
	var jobs []pg.JobInsert
	for i := range 72 {
		jobs = append(jobs, pg.JobInsert{Queue: "fair", Handler: "h", FairnessKey: str("acme"),
			ConcurrencyKey: str("account-" + strconv.Itoa(i%24))})
	}
	if _, err := db.JobInsertMany(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	insertFor(t, db, "fair", str("other"), 72)
	if pgtest.Citus() {
		shards, err := db.QueryInt(ctx, `SELECT count(DISTINCT get_shard_id_for_distribution_column('jobs', placement))
			FROM jobs WHERE fairness_key = 'acme'`)
		if err != nil || shards < 8 {
			t.Fatalf("acme's jobs are on %d shards (%v), want them spread", shards, err)
		}
	}

	const slots = 100
	own := map[string]int{}
	for round, idle := 0, 0; idle < 3; round++ {
		if round == 40 {
			t.Fatalf("the claims did not settle in 40 rounds: %v in flight", own)
		}
		got := claimedKeysOwning(t, db, "fair", slots-own["acme"]-own["other"], slots, "p", maps.Clone(own))
		if len(got) == 0 {
			idle++
		}
		for k, n := range got {
			own[k] += n
		}
	}
	t.Logf("in flight with %d slots: %v", slots, own)
	if own["acme"] != 24 || own["other"] < 45 || own["other"] > 50 {
		t.Fatalf("in flight with %d slots: %v; want acme's 24 accounts one step each, other its half of the slots", slots, own)
	}
}
