package pg_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// On Citus a rate-limited job lives at its bucket's placement, where the bucket is minted
// at insert and debited by the claim (docs/citus.md, "Rate limits"): exactly burst steps
// of a bucket at rate 0, whatever the number of claims, and the other bucket untouched.
func TestCitusRateLimitedJobsLiveAtTheirBucket(t *testing.T) {
	t.Parallel()
	citusOnly(t)
	db := pgtest.NewDB(t)
	ctx := context.Background()
	if _, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://127.0.0.1:1/"}); err != nil {
		t.Fatal(err)
	}
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

// What Citus cannot keep exact for a rate-limited job is refused, naming the field, and
// nothing is written.
func TestCitusRateLimitsRefusedWhereTheyCannotHold(t *testing.T) {
	t.Parallel()
	citusOnly(t)
	db := pgtest.NewDB(t)
	ctx := context.Background()
	if _, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://127.0.0.1:1/"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.RateLimitUpsert(ctx, "api", 1, 2); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		item  pg.JobInsert
		field string
	}{
		{"two limits", pg.JobInsert{Handler: "h", RateLimit: ptr("api"), ExtraRateLimits: []pg.RateLimitUse{{Name: "api", Key: "x", Weight: 1}}}, "rate_limits"},
		{"a concurrency key", pg.JobInsert{Handler: "h", RateLimit: ptr("api"), ConcurrencyKey: ptr("k")}, "rate_limit"},
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

// placementKey is the placement of job id, as text.
func placementKey(id int64) string { return fmt.Sprint(id % pg.Placements) }

func ptr[T any](v T) *T { return &v }
