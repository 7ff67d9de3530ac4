package pg_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
)

// On Citus a rate-limited job lives at its bucket's placement, where the bucket is minted
// at insert and debited by the claim (docs/citus.md, "Rate limits"): exactly burst steps
// of a bucket at rate 0, whatever the number of claims, and the other bucket untouched.
func TestCitusRateLimitedJobsLiveAtTheirBucket(t *testing.T) {
	t.Parallel()
	citusOnly(t)
	db := citusDBWithHandler(t)
	ctx := context.Background()
	if _, err := db.RateLimitUpsert(ctx, "api", 0, 3); err != nil {
		t.Fatal(err)
	}
	var items []pg.JobInsert
	for i := range 10 {
		for _, key := range []string{"c1", "c2"} {
			items = append(items, pg.JobInsert{Queue: "q", Handler: "h", Input: []byte(fmt.Sprintf(`{"n": %d}`, i)),
				RateLimit: ptr("api"), RateKey: ptr(key)})
		}
	}
	inserted, err := db.JobInsertMany(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	for i, j := range inserted {
		want := pg.RateBucketPlacement("api", *items[i].RateKey)
		if int(j.ID%pg.Placements) != want {
			t.Fatalf("job %d of bucket %s: placement %d, want the bucket's %d", j.ID, *items[i].RateKey, j.ID%pg.Placements, want)
		}
	}
	rows, err := db.QueryStrings(ctx, `SELECT key, placement::text, tokens::text, updated_at = '-infinity' FROM rate_buckets ORDER BY key`)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"c1", fmt.Sprint(pg.RateBucketPlacement("api", "c1")), "0", "true"},
		{"c2", fmt.Sprint(pg.RateBucketPlacement("api", "c2")), "0", "true"}}
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Fatalf("buckets minted at insert: %v, want %v", rows, want)
	}
	granted := map[string]int{}
	for range 5 {
		claimed, err := db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: "q", Limit: 4, LeaseTTL: time.Minute, Owner: "t", SignalCap: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range claimed {
			granted[placementKey(c.ID)]++
		}
	}
	c1, c2 := fmt.Sprint(pg.RateBucketPlacement("api", "c1")), fmt.Sprint(pg.RateBucketPlacement("api", "c2"))
	if granted[c1] != 3 || granted[c2] != 3 {
		t.Fatalf("granted %v, want 3 of each bucket (burst 3, rate 0)", granted)
	}
	rows, err = db.QueryStrings(ctx, `SELECT key, tokens::text FROM rate_buckets ORDER BY key`)
	if err != nil || fmt.Sprint(rows) != "[[c1 0] [c2 0]]" {
		t.Fatalf("buckets after the grants: %v %v, want both at 0", rows, err)
	}

	// A limit deleted (its buckets with it) and put back: the buckets of its live jobs are
	// minted again, and their jobs run.
	if err := db.RateLimitDelete(ctx, "api"); err != nil {
		t.Fatal(err)
	}
	l, err := db.RateLimitUpsert(ctx, "api", 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	if l.Buckets != 2 {
		t.Fatalf("the limit put back has %d buckets, want the 2 of its live jobs", l.Buckets)
	}
	claimed, err := db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: "q", Limit: 20, LeaseTTL: time.Minute, Owner: "t", SignalCap: 10})
	if err != nil || len(claimed) != 4 {
		t.Fatalf("after the limit was put back: %d claimed (%v), want 2 per bucket", len(claimed), err)
	}
}

// A rate limit that cannot be met is refused on Citus as on plain PostgreSQL, naming the
// field, and nothing is written.
func TestCitusRateLimitsRefusedWhereTheyCannotHold(t *testing.T) {
	t.Parallel()
	citusOnly(t)
	db := citusDBWithHandler(t)
	ctx := context.Background()
	if _, err := db.RateLimitUpsert(ctx, "api", 1, 2); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		item  pg.JobInsert
		field string
	}{
		{"an unknown limit", pg.JobInsert{Handler: "h", RateLimit: ptr("nope")}, "rate_limit/name"},
		{"a weight above the burst", pg.JobInsert{Handler: "h", RateLimit: ptr("api"), RateWeight: ptr(3)}, "rate_limit/weight"},
	}
	for _, c := range cases {
		_, err := db.JobInsertMany(ctx, []pg.JobInsert{{Handler: "h"}, c.item})
		var refused *pg.InsertRefusedError
		if !errors.As(err, &refused) || len(refused.Problems) != 1 || refused.Problems[0].Field != c.field || refused.Problems[0].Index != 1 {
			t.Errorf("%s: %v, want item 1 refused naming %s", c.name, err, c.field)
		}
	}
	n, err := db.QueryInt(ctx, `SELECT (SELECT count(*) FROM jobs) + (SELECT count(*) FROM rate_buckets)`)
	if err != nil || n != 0 {
		t.Fatalf("jobs and buckets after the refusals: %d %v, want none", n, err)
	}
}

// A rate-limited job that its concurrency key places elsewhere keeps its bucket at the
// bucket's placement (a remote bucket, docs/citus.md "Rate limits"): the claims on the
// jobs' shards lease them, and the bucket, debited on its own shard before each call,
// pays for exactly its burst however many claimers; the steps it cannot pay for are given
// back, their attempts uncounted, to be asked again later. A debounced job's bucket too.
func TestCitusRemoteBucketPaysExactlyItsBurstAcrossShards(t *testing.T) {
	t.Parallel()
	citusOnly(t)
	db := citusDBWithHandler(t)
	ctx := context.Background()
	if _, err := db.RateLimitUpsert(ctx, "api", 0, 5); err != nil {
		t.Fatal(err)
	}
	var items []pg.JobInsert
	for i := range 60 {
		items = append(items, pg.JobInsert{Queue: "q", Handler: "h", ConcurrencyKey: ptr(fmt.Sprintf("customer-%d", i)),
			RateLimit: ptr("api")})
	}
	if _, err := db.JobInsertMany(ctx, items); err != nil {
		t.Fatalf("a rate limit beside a concurrency key: %v", err)
	}
	bucket := pg.RateBucketPlacement("api", "")
	rows, err := db.QueryStrings(ctx, `SELECT count(DISTINCT get_shard_id_for_distribution_column('jobs', placement)),
		count(*) FILTER (WHERE placement <> $1 AND rate_placement IS DISTINCT FROM $1),
		count(*) FILTER (WHERE placement = $1 AND rate_placement IS NOT NULL)
		FROM jobs`, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if rows[0][0] == "1" || rows[0][1] != "0" || rows[0][2] != "0" {
		t.Fatalf("jobs (shards, away from the bucket without naming it, at it naming it) = %v, want many shards, 0, 0", rows[0])
	}
	var wg sync.WaitGroup
	var granted atomic.Int64
	for range 8 {
		wg.Go(func() {
			for empty := 0; empty < 3; {
				claimed, err := db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: "q", Limit: 10, LeaseTTL: time.Minute, Owner: "t", SignalCap: 10})
				if err != nil {
					t.Error(err)
					return
				}
				granted.Add(int64(len(claimed)))
				if len(claimed) == 0 {
					empty++
				}
			}
		})
	}
	wg.Wait()
	if granted.Load() != 5 {
		t.Fatalf("granted %d steps, want exactly the burst, 5 (rate 0)", granted.Load())
	}
	rows, err = db.QueryStrings(ctx, `SELECT
		(SELECT count(*) FROM jobs WHERE status = 'executing'),
		(SELECT count(*) FROM jobs WHERE status = 'runnable' AND attempt = 0 AND eligible_at > now() + interval '2 seconds'),
		(SELECT string_agg(tokens::text, ',') FROM rate_buckets)`)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(rows[0]) != "[5 55 0]" {
		t.Fatalf("(executing, given back uncounted to wait, bucket tokens) = %v, want [5 55 0]", rows[0])
	}

	// A debounced job lives at its debounce key's placement; its bucket is minted by the
	// insert and debited by its claimer.
	if _, err := db.RateLimitUpsert(ctx, "fast", 1000, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := db.JobInsertMany(ctx, []pg.JobInsert{{Queue: "d", Handler: "h", RateLimit: ptr("fast"), RateKey: ptr("acme"),
		Debounce: &pg.Debounce{Key: "sync-acme", Period: time.Millisecond}}}); err != nil {
		t.Fatalf("a rate limit beside a debounce key: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		claimed, err := db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: "d", Limit: 10, LeaseTTL: time.Minute, Owner: "t", SignalCap: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(claimed) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the debounced rate-limited job was never claimed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	tokens, err := db.QueryStrings(ctx, `SELECT placement::text, (tokens < 10)::text FROM rate_buckets WHERE name = 'fast'`)
	if err != nil || fmt.Sprint(tokens) != fmt.Sprintf("[[%d true]]", pg.RateBucketPlacement("fast", "acme")) {
		t.Fatalf("the debounced job's bucket: %v %v, want debited at its own placement", tokens, err)
	}
}

// A job naming several rate limits on Citus has all its buckets debited by its claimer, or
// none: a bucket that pays for a step another of its buckets refuses gets its tokens back.
func TestCitusSeveralRateLimitsPayAllOrNone(t *testing.T) {
	t.Parallel()
	citusOnly(t)
	db := citusDBWithHandler(t)
	ctx := context.Background()
	for name, burst := range map[string]float64{"api": 3, "email": 1} {
		if _, err := db.RateLimitUpsert(ctx, name, 0, burst); err != nil {
			t.Fatal(err)
		}
	}
	both := pg.JobInsert{Queue: "q", Handler: "h", RateLimit: ptr("api"), RateKey: ptr("c7"),
		ExtraRateLimits: []pg.RateLimitUse{{Name: "email", Key: "c7", Weight: 1}}}
	inserted, err := db.JobInsertMany(ctx, []pg.JobInsert{both, both})
	if err != nil {
		t.Fatalf("two rate limits on one job: %v", err)
	}
	var claimed []pg.ClaimedJob
	for range 3 {
		got, err := db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: "q", Limit: 10, LeaseTTL: time.Minute, Owner: "t", SignalCap: 10})
		if err != nil {
			t.Fatal(err)
		}
		claimed = append(claimed, got...)
	}
	if len(claimed) != 1 || claimed[0].ID != inserted[0].ID {
		t.Fatalf("claimed %d steps, want only the first job's (email holds one token)", len(claimed))
	}
	rows, err := db.QueryStrings(ctx, `SELECT name, tokens::text FROM rate_buckets ORDER BY name`)
	if err != nil || fmt.Sprint(rows) != "[[api 2] [email 0]]" {
		t.Fatalf("buckets after one grant: %v %v, want api 2 (the denied job's debit given back) and email 0", rows, err)
	}
	second, err := db.JobGet(ctx, inserted[1].ID)
	if err != nil || second.Status != "runnable" || second.Attempt != 0 {
		t.Fatalf("the denied job: %+v %v, want runnable, no attempt counted", second, err)
	}
}

// A PUT of a rate limit wakes the steps its remote buckets gave back (migrations/citus/0034):
// they are runnable at once, where before they waited for the time the old limit gave (a
// minute at rate 0). A step a run_at delays, or that waits on another limit, is left alone.
func TestCitusRateLimitPutWakesTheStepsItsBucketsGaveBack(t *testing.T) {
	t.Parallel()
	citusOnly(t)
	db := citusDBWithHandler(t)
	ctx := context.Background()
	for name, burst := range map[string]float64{"api": 1, "email": 1, "free": 100} {
		if _, err := db.RateLimitUpsert(ctx, name, 0, burst); err != nil {
			t.Fatal(err)
		}
	}
	// Concurrency keys away from api's bucket: each job's bucket is remote.
	var keys []string
	for i := 0; len(keys) < 4; i++ {
		if k := fmt.Sprintf("customer-%d", i); pg.PlacementOfKey(k) != pg.RateBucketPlacement("api", "") {
			keys = append(keys, k)
		}
	}
	var items []pg.JobInsert
	for _, k := range keys[:3] {
		items = append(items, pg.JobInsert{Queue: "q", Handler: "h", ConcurrencyKey: ptr(k), RateLimit: ptr("api")})
	}
	twoLimits := pg.JobInsert{Queue: "q", Handler: "h", RateLimit: ptr("free"), RateKey: ptr("c7"),
		ExtraRateLimits: []pg.RateLimitUse{{Name: "email", Key: "c7", Weight: 1}}}
	later := time.Now().Add(time.Hour)
	items = append(items, twoLimits, twoLimits,
		pg.JobInsert{Queue: "q", Handler: "h", ConcurrencyKey: ptr(keys[3]), RateLimit: ptr("api"), RunAt: &later})
	inserted, err := db.JobInsertMany(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	claimUntilEmpty := func() (granted int) {
		for empty := 0; empty < 3; {
			claimed, err := db.JobClaimBatch(ctx, pg.JobClaimParams{Queue: "q", Limit: 10, LeaseTTL: time.Minute, Owner: "t", SignalCap: 10})
			if err != nil {
				t.Fatal(err)
			}
			if granted += len(claimed); len(claimed) == 0 {
				empty++
			}
		}
		return granted
	}
	if n := claimUntilEmpty(); n != 2 {
		t.Fatalf("granted %d steps, want 2: one of api's burst, one of email's", n)
	}
	waiting := func(ids ...int64) string {
		t.Helper()
		rows, err := db.QueryStrings(ctx, `SELECT
			count(*) FILTER (WHERE rate_waited_until = eligible_at AND eligible_at > now() + interval '30 seconds'),
			count(*) FILTER (WHERE eligible_at <= now() AND rate_waited_until IS NOT NULL)
			FROM jobs WHERE status = 'runnable' AND attempt = 0 AND id = ANY($1)`, ids)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(rows[0])
	}
	apiJobs := []int64{inserted[0].ID, inserted[1].ID, inserted[2].ID}
	emailJobs := []int64{inserted[3].ID, inserted[4].ID}
	if got := waiting(apiJobs...); got != "[2 0]" {
		t.Fatalf("api's jobs (given back for a minute, runnable now) = %s, want [2 0]", got)
	}
	if got := waiting(emailJobs...); got != "[1 0]" {
		t.Fatalf("email's jobs (given back for a minute, runnable now) = %s, want [1 0]", got)
	}

	if _, err := db.RateLimitUpsert(ctx, "api", 1000, 5); err != nil {
		t.Fatal(err)
	}
	if got := waiting(apiJobs...); got != "[0 2]" {
		t.Fatalf("api's jobs after its PUT = %s, want [0 2]: both given back runnable now", got)
	}
	if got := waiting(emailJobs...); got != "[1 0]" {
		t.Fatalf("email's jobs after api's PUT = %s, want [1 0]: still waiting on email", got)
	}
	delayed, err := db.JobGet(ctx, inserted[5].ID)
	if err != nil || !delayed.EligibleAt.After(time.Now().Add(50*time.Minute)) {
		t.Fatalf("the job its run_at delays: %+v %v; want it left an hour out", delayed, err)
	}
	if _, err := db.RateLimitUpsert(ctx, "email", 1000, 1); err != nil {
		t.Fatal(err)
	}
	if got := waiting(emailJobs...); got != "[0 1]" {
		t.Fatalf("email's jobs after its PUT = %s, want [0 1]: woken through its second limit", got)
	}
	deadline := time.Now().Add(30 * time.Second)
	granted := 0
	for granted < 3 && time.Now().Before(deadline) {
		granted += claimUntilEmpty()
	}
	if granted != 3 {
		t.Fatalf("granted %d steps after the PUTs, want the 3 woken", granted)
	}
}

// placementKey is the placement of job id, as text.
func placementKey(id int64) string { return fmt.Sprint(id % pg.Placements) }

func ptr[T any](v T) *T { return &v }
