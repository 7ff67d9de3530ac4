package pg_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// The plain claim claims the candidates that need no admission, leaves the others
// runnable and counts them, and says so even when it claims nothing.
func TestPlainClaimLeavesRowsThatNeedAdmission(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	if _, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://example.test/", NewSecret: "whsec_x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.RateLimitUpsert(ctx, "r", 100, 100); err != nil {
		t.Fatal(err)
	}
	jobs := []pg.JobInsert{{Queue: "q", Handler: "h"}, {Queue: "q", Handler: "h", ConcurrencyKey: str("k")},
		{Queue: "q", Handler: "h"}, {Queue: "q", Handler: "h", RateLimit: str("r")}, {Queue: "q", Handler: "h"}}
	if _, err := db.JobInsertMany(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	p := pg.JobClaimParams{Queue: "q", Limit: 10, LeaseTTL: time.Minute, Owner: "t", SignalCap: 100}
	claimed, others, err := db.JobClaimPlain(ctx, p)
	if err != nil || len(claimed) != 3 || others != 2 {
		t.Fatalf("plain claim: %d claimed, %d others, %v; want 3 and 2", len(claimed), others, err)
	}
	for _, c := range claimed {
		if c.Handler != "h" || c.HandlerURL == nil || c.Attempt != 1 || c.LeaseToken == "" || c.GateShard != nil {
			t.Fatalf("claimed %+v", c)
		}
		if j, err := db.JobGet(ctx, c.ID); err != nil || j.Status != "executing" {
			t.Fatalf("claimed job %d: %v, %v", c.ID, j.Status, err)
		}
	}
	if n, err := db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE status = 'runnable' AND (concurrency_key IS NOT NULL OR rate_limit IS NOT NULL)`); err != nil || n != 2 {
		t.Fatalf("rows that need admission left runnable: %d, %v", n, err)
	}
	claimed, others, err = db.JobClaimPlain(ctx, p)
	if err != nil || len(claimed) != 0 || others != 2 {
		t.Fatalf("plain claim of a queue left with rows that need admission: %d claimed, %d others, %v", len(claimed), others, err)
	}
	claimed, err = db.JobClaimBatch(ctx, p)
	if err != nil || len(claimed) != 2 {
		t.Fatalf("the claim with admission took %d, %v; want 2", len(claimed), err)
	}
	claimed, others, err = db.JobClaimPlain(ctx, p)
	if err != nil || len(claimed) != 0 || others != 0 {
		t.Fatalf("plain claim of an empty queue: %d claimed, %d others, %v", len(claimed), others, err)
	}
}

// A plain claim answers what the claim with admission answers for the same row, column
// for column (JobClaimPlain's answer is read by hand).
func TestPlainClaimAnswersAsTheClaimWithAdmission(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	timeout, base, attempts := 1234, 20, 7
	if _, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://example.test/", NewSecret: "whsec_x",
		TimeoutMS: &timeout, BackoffBaseMS: &base, MaxAttempts: &attempts}); err != nil {
		t.Fatal(err)
	}
	var got [2]pg.ClaimedJob
	for i, queue := range []string{"plain", "full"} {
		if _, err := db.JobInsertMany(ctx, []pg.JobInsert{{Queue: queue, Handler: "h", Key: str("key-" + queue),
			Input: []byte(`{"n": 1}`)}}); err != nil {
			t.Fatal(err)
		}
		p := pg.JobClaimParams{Queue: queue, Limit: 10, LeaseTTL: time.Minute, Owner: "t", SignalCap: 100}
		var claimed []pg.ClaimedJob
		var err error
		if queue == "plain" {
			claimed, _, err = db.JobClaimPlain(ctx, p)
		} else {
			claimed, err = db.JobClaimBatch(ctx, p)
		}
		if err != nil || len(claimed) != 1 {
			t.Fatalf("%s: %d claimed, %v", queue, len(claimed), err)
		}
		c := claimed[0]
		if c.ID == 0 || c.LeaseToken == "" || c.CreatedAt.IsZero() || c.ClaimedAt.IsZero() || !c.LeaseExpiresAt.After(c.ClaimedAt) {
			t.Fatalf("%s: %+v", queue, c)
		}
		c.ID, c.LeaseToken, c.CreatedAt, c.ClaimedAt, c.LeaseExpiresAt, c.Queue = 0, "", time.Time{}, time.Time{}, time.Time{}, ""
		c.Key = nil
		got[i] = c
	}
	if !reflect.DeepEqual(got[0], got[1]) {
		t.Fatalf("the plain claim answered\n%+v\nthe claim with admission\n%+v", got[0], got[1])
	}
}

// The two claims scan alike: JobClaimPlain's candidates are JobClaimBatch's, word for word.
func TestPlainClaimScansAsTheClaimWithAdmission(t *testing.T) {
	t.Parallel()
	plain, err := parseStatement(pg.Statement("JobClaimPlain"))
	if err != nil {
		t.Fatal(err)
	}
	full, err := parseStatement(pg.Statement("JobClaimBatch"))
	if err != nil {
		t.Fatal(err)
	}
	if plain.ctes["candidates"] == "" || plain.ctes["candidates"] != full.ctes["candidates"] {
		t.Fatalf("the candidates differ: %s", firstDifference(plain.ctes["candidates"], full.ctes["candidates"]))
	}
}
