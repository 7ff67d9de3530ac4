package pg_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// A job with a key and a concurrency key lives at its concurrency key's placement, away
// from its key's (a displaced key: docs/citus.md, "Displaced keys"); the key still has one
// live holder across the cluster, whoever inserts it (the API, with or without a
// concurrency key, gendurable_enqueue), and a signal, a read by key, a retry, a replay and
// a bulk retry all see the job that holds it.
func TestCitusDisplacedKeyHasOneLiveHolder(t *testing.T) {
	t.Parallel()
	citusOnly(t)
	db := citusDBWithHandler(t)
	ctx := context.Background()
	key := "order-1"
	if pg.PlacementOfKey(key) == pg.PlacementOfKey("customer-9") {
		t.Fatal("the test's keys share a placement: nothing would be displaced")
	}
	first, err := db.JobInsertMany(ctx, []pg.JobInsert{{Handler: "h", Key: &key, ConcurrencyKey: ptr("customer-9")}})
	if err != nil {
		t.Fatal(err)
	}
	a := first[0].ID
	if got, want := int(a%pg.Placements), pg.PlacementOfKey("customer-9"); got != want {
		t.Fatalf("job %d at placement %d, want its concurrency key's %d", a, got, want)
	}
	// Every later insert of the key answers the holder: plain, displaced elsewhere, in one
	// batch, and through gendurable_enqueue.
	again, err := db.JobInsertMany(ctx, []pg.JobInsert{
		{Handler: "h", Key: &key},
		{Handler: "h", Key: &key, ConcurrencyKey: ptr("customer-3")},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, j := range again {
		if j.ID != a || !j.Deduplicated {
			t.Fatalf("insert %d of the held key: job %d (deduplicated %v), want the holder %d", i, j.ID, j.Deduplicated, a)
		}
	}
	for _, opts := range []string{`{"key": "order-1"}`, `{"key": "order-1", "concurrency_key": "customer-3"}`} {
		if id, err := db.QueryInt(ctx, `SELECT gendurable_enqueue('h', '{}', $1::jsonb)`, opts); err != nil || id != a {
			t.Fatalf("gendurable_enqueue %s: %d %v, want the holder %d", opts, id, err, a)
		}
	}
	if j, err := db.JobGetLiveByKey(ctx, key); err != nil || j.ID != a {
		t.Fatalf("the key's live job: %d %v, want %d", j.ID, err, a)
	}
	d, err := db.SignalDeliver(ctx, nil, &key, "go", []byte(`{}`), nil)
	if err != nil || d.JobID != a || d.SignalID == nil {
		t.Fatalf("a signal by key: %+v %v, want it delivered to %d", d, err, a)
	}
	liveWithKey := func() int64 {
		t.Helper()
		n, err := db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE key = $1 AND status IN ('runnable', 'executing', 'awaiting')`, key)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := liveWithKey(); n != 1 {
		t.Fatalf("%d live jobs hold the key, want 1", n)
	}

	// Once the holder is cancelled the key is free: a plain insert takes it at the key's
	// placement, and the old holder cannot be retried, replayed or rerun while it holds.
	if _, _, err := db.JobCancel(ctx, a); err != nil {
		t.Fatal(err)
	}
	taken, err := db.JobInsertMany(ctx, []pg.JobInsert{{Handler: "h", Key: &key}})
	if err != nil || taken[0].Deduplicated {
		t.Fatalf("an insert of the freed key: %+v %v, want a new job", taken, err)
	}
	b := taken[0].ID
	if err := db.JobRetry(ctx, a); !errors.Is(err, pg.ErrConflict) {
		t.Fatalf("a retry of the displaced job while %d holds its key: %v, want ErrConflict", b, err)
	}
	if err := db.JobReplay(ctx, a, 0, nil); !errors.Is(err, pg.ErrConflict) {
		t.Fatalf("a replay of the displaced job while %d holds its key: %v, want ErrConflict", b, err)
	}
	if _, err := db.JobRerun(ctx, a, nil); !errors.Is(err, pg.ErrConflict) {
		t.Fatalf("a rerun of the displaced job while %d holds its key: %v, want ErrConflict", b, err)
	}
	queue := "default"
	if r, err := db.JobRetryMany(ctx, pg.JobFilter{Queue: &queue}, 100); err != nil || r.Changed != 0 {
		t.Fatalf("a bulk retry while the key is held: %+v %v, want nothing retried", r, err)
	}
	// The other way round: b cancelled, a retried (it holds the key again, named by the
	// holder row); b is then neither retried by id nor by the bulk retry.
	if _, _, err := db.JobCancel(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := db.JobRetry(ctx, a); err != nil {
		t.Fatalf("a retry of the displaced job once its key is free: %v", err)
	}
	if j, err := db.JobGetLiveByKey(ctx, key); err != nil || j.ID != a {
		t.Fatalf("the key's live job after the retry: %d %v, want %d", j.ID, err, a)
	}
	if err := db.JobRetry(ctx, a); !errors.Is(err, pg.ErrNotFound) {
		t.Fatalf("a retry of the live displaced job: %v, want ErrNotFound (nothing to retry), as on plain PostgreSQL", err)
	}
	if err := db.JobRetry(ctx, b); !errors.Is(err, pg.ErrConflict) {
		t.Fatalf("a retry of %d while the displaced %d holds the key: %v, want ErrConflict", b, a, err)
	}
	if r, err := db.JobRetryMany(ctx, pg.JobFilter{Queue: &queue}, 100); err != nil || r.Changed != 0 {
		t.Fatalf("a bulk retry while the displaced job holds the key: %+v %v, want nothing retried", r, err)
	}
	if n := liveWithKey(); n != 1 {
		t.Fatalf("%d live jobs hold the key, want 1", n)
	}
}

// Many inserts of the same keys at once, from many connections, half of them with a
// concurrency key (displaced) and half without, through the API's insert and
// gendurable_enqueue (40 at once): each key ends with exactly one live job, and every insert of a key
// answers that job.
func TestCitusDisplacedKeysUnderConcurrentInserts(t *testing.T) {
	t.Parallel()
	citusOnly(t)
	db := pgtest.Open(t, pgtest.NewDatabase(t), pg.Options{MaxConns: 40})
	ctx := context.Background()
	if _, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://127.0.0.1:1/"}); err != nil {
		t.Fatal(err)
	}
	const keys, inserters = 4, 10
	answers := make([][]int64, keys)
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, keys*inserters)
	start := make(chan struct{}) // every insert at once
	for k := range keys {
		key := fmt.Sprintf("race-%d", k)
		for g := range inserters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				var id int64
				var err error
				switch g % 4 {
				case 0:
					var out []pg.JobInserted
					if out, err = db.JobInsertMany(ctx, []pg.JobInsert{{Handler: "h", Key: &key}}); err == nil {
						id = out[0].ID
					}
				case 1:
					var out []pg.JobInserted
					if out, err = db.JobInsertMany(ctx, []pg.JobInsert{{Handler: "h", Key: &key, ConcurrencyKey: ptr(fmt.Sprintf("c-%d", g))}}); err == nil {
						id = out[0].ID
					}
				case 2:
					id, err = db.QueryInt(ctx, `SELECT gendurable_enqueue('h', '{}', jsonb_build_object('key', $1::text))`, key)
				case 3:
					id, err = db.QueryInt(ctx, `SELECT gendurable_enqueue('h', '{}', jsonb_build_object('key', $1::text, 'concurrency_key', $2::text))`,
						key, fmt.Sprintf("c-%d", g))
				}
				if err != nil {
					errs <- fmt.Errorf("key %s, inserter %d: %w", key, g, err)
					return
				}
				mu.Lock()
				answers[k] = append(answers[k], id)
				mu.Unlock()
			}()
		}
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for k := range keys {
		key := fmt.Sprintf("race-%d", k)
		live, err := db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE key = $1 AND status IN ('runnable', 'executing', 'awaiting')`, key)
		if err != nil || live != 1 {
			t.Fatalf("key %s: %d live jobs (%v), want 1", key, live, err)
		}
		for _, id := range answers[k] {
			if id != answers[k][0] {
				t.Fatalf("key %s: the inserts answered %v, want one job", key, answers[k])
			}
		}
	}
}

// A rate-limited job may have a key: it lives at its bucket's placement, and its key is
// displaced.
func TestCitusRateLimitedJobWithAKey(t *testing.T) {
	t.Parallel()
	citusOnly(t)
	db := citusDBWithHandler(t)
	ctx := context.Background()
	if _, err := db.RateLimitUpsert(ctx, "api", 1, 2); err != nil {
		t.Fatal(err)
	}
	item := pg.JobInsert{Handler: "h", Key: ptr("invoice-4"), RateLimit: ptr("api"), RateKey: ptr("acme")}
	first, err := db.JobInsertMany(ctx, []pg.JobInsert{item})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := int(first[0].ID%pg.Placements), pg.RateBucketPlacement("api", "acme"); got != want {
		t.Fatalf("job %d at placement %d, want its bucket's %d", first[0].ID, got, want)
	}
	again, err := db.JobInsertMany(ctx, []pg.JobInsert{item, {Handler: "h", Key: ptr("invoice-4")}})
	if err != nil {
		t.Fatal(err)
	}
	for i, j := range again {
		if j.ID != first[0].ID || !j.Deduplicated {
			t.Fatalf("insert %d of the held key: job %d, want the holder %d", i, j.ID, first[0].ID)
		}
	}
}

// A bulk retry by filter walks a shard's failed and cancelled jobs a window at a time:
// jobs whose key a live job holds are not in the window, so five cancelled jobs of a key
// (one of them retried, holding it again) do not keep the job of another key of the same
// shard from its turn.
func TestCitusBulkRetryPassesOverHeldKeys(t *testing.T) {
	t.Parallel()
	citusOnly(t)
	db := citusDBWithHandler(t)
	ctx := context.Background()
	keys, _ := keysOfShard0(t, db)
	for _, k := range []string{keys[0], keys[0], keys[0], keys[0], keys[0], keys[1]} {
		out, err := db.JobInsertMany(ctx, []pg.JobInsert{{Handler: "h", Queue: "bulk", Key: &k}})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := db.JobCancel(ctx, out[0].ID); err != nil {
			t.Fatal(err)
		}
	}
	queue := "bulk"
	for range 4 {
		r, err := db.JobRetryMany(ctx, pg.JobFilter{Queue: &queue}, 2)
		if err != nil {
			t.Fatal(err)
		}
		if r.Changed == 0 {
			break
		}
	}
	for i, k := range keys {
		n, err := db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE key = $1 AND status = 'runnable'`, k)
		if err != nil || n != 1 {
			t.Fatalf("key %d (%s): %d runnable jobs after the bulk retries (%v), want 1", i, k, n, err)
		}
	}
}

// A bulk retry by filter takes jobs whose keys are displaced, and names each retried
// keyed job its key's holder, so that the key's next insert answers it; and a shard's
// window full of jobs whose key a displaced job elsewhere holds does not keep another key
// of the shard from its turn.
func TestCitusBulkRetryTakesDisplacedKeys(t *testing.T) {
	t.Parallel()
	citusOnly(t)
	db := citusDBWithHandler(t)
	ctx := context.Background()
	keys, elsewhere := keysOfShard0(t, db)
	insert := func(it pg.JobInsert) int64 {
		t.Helper()
		it.Handler, it.Queue = "h", "bulk"
		out, err := db.JobInsertMany(ctx, []pg.JobInsert{it})
		if err != nil || out[0].Deduplicated {
			t.Fatalf("insert %+v: %+v (%v), want a new job", it, out, err)
		}
		return out[0].ID
	}
	cancel := func(id int64) {
		t.Helper()
		if _, _, err := db.JobCancel(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	// A cancelled job whose key is displaced.
	displaced := insert(pg.JobInsert{Key: ptr("order-1"), ConcurrencyKey: &elsewhere[0]})
	cancel(displaced)
	// Five cancelled jobs of keys[0] on shard 0, then a live job of that key elsewhere.
	for range 5 {
		cancel(insert(pg.JobInsert{Key: &keys[0]}))
	}
	holder := insert(pg.JobInsert{Key: &keys[0], ConcurrencyKey: &elsewhere[1]})
	// And a cancelled job of keys[1], after them on shard 0.
	other := insert(pg.JobInsert{Key: &keys[1]})
	cancel(other)

	queue := "bulk"
	retried := 0
	for range 20 {
		r, err := db.JobRetryMany(ctx, pg.JobFilter{Queue: &queue}, 2)
		if err != nil {
			t.Fatal(err)
		}
		retried += r.Changed
		if !r.More && r.Changed == 0 {
			break
		}
	}
	if retried != 2 {
		t.Fatalf("the bulk retries retried %d jobs, want 2: the displaced one and the other key's", retried)
	}
	for key, want := range map[string]int64{"order-1": displaced, keys[0]: holder, keys[1]: other} {
		j, err := db.JobGetLiveByKey(ctx, key)
		if err != nil || j.ID != want {
			t.Fatalf("the live job of %s: %d (%v), want %d", key, j.ID, err, want)
		}
		n, err := db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE key = $1 AND status IN ('runnable', 'executing', 'awaiting')`, key)
		if err != nil || n != 1 {
			t.Fatalf("%d live jobs of %s (%v), want 1", n, key, err)
		}
	}
	// The retried displaced job holds its key: the key's next insert, and one through
	// gendurable_enqueue, answer it.
	again, err := db.JobInsertMany(ctx, []pg.JobInsert{{Handler: "h", Queue: "bulk", Key: ptr("order-1")}})
	if err != nil || !again[0].Deduplicated || again[0].ID != displaced {
		t.Fatalf("an insert of order-1 after the bulk retry: %+v (%v), want the retried job %d", again, err, displaced)
	}
	if id, err := db.QueryInt(ctx, `SELECT gendurable_enqueue('h', '{}', '{"queue": "bulk", "key": "order-1"}')`); err != nil || id != displaced {
		t.Fatalf("gendurable_enqueue of order-1 after the bulk retry: %d (%v), want %d", id, err, displaced)
	}
}

// keysOfShard0 names two keys ("bulk-N") whose placements are on the first shard, and two
// ("customer-N") whose placements are not.
func keysOfShard0(t *testing.T, db *pg.DB) (on, off []string) {
	t.Helper()
	shard, err := pg.CitusShardPlacements(context.Background(), db, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; len(on) < 2; i++ {
		if k := fmt.Sprintf("bulk-%d", i); slices.Contains(shard, pg.PlacementOfKey(k)) {
			on = append(on, k)
		}
	}
	for i := 0; len(off) < 2; i++ {
		if k := fmt.Sprintf("customer-%d", i); !slices.Contains(shard, pg.PlacementOfKey(k)) {
			off = append(off, k)
		}
	}
	return on, off
}
