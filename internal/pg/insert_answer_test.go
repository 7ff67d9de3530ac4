package pg_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// The batch insert answers an inserted job from a narrow row plus the request and the
// table's defaults: every field must be what a read of the stored row gives.
func TestBatchInsertAnswerIsTheStoredJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	if _, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://example.test/", NewSecret: "whsec_x",
		MaxAttempts: intp(7)}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.RateLimitUpsert(ctx, "api", 10, 5); err != nil {
		t.Fatal(err)
	}
	parent, err := db.JobInsertMany(ctx, []pg.JobInsert{{Queue: "q", Handler: "h"}})
	if err != nil {
		t.Fatal(err)
	}
	runAt := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	items := []pg.JobInsert{
		{Queue: "q", Handler: "h"},
		// jsonb stores the input normalized: the answer must show the stored form.
		{Queue: "q", Handler: "h", Input: json.RawMessage(`{ "b": 1,  "a": [1, 2.50, 1e2], "b": 2 }`)},
		{Queue: "other", Handler: "h", Key: str("k"), Priority: intp(0), DelayMS: int64p(60_000),
			ConcurrencyKey: str("c"), RateLimit: str("api"), RateKey: str("u7"), RateWeight: intp(3),
			MaxAttempts: intp(2), ParentID: &parent[0].ID, IdempotencyKey: str("i")},
		{Queue: "q", Handler: "h", RunAt: &runAt, Priority: intp(9), RateLimit: str("api")},
	}
	got, err := db.JobInsertMany(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range got {
		stored, err := db.JobGet(ctx, g.ID)
		if err != nil {
			t.Fatal(err)
		}
		if want := utc(stored.Job); !reflect.DeepEqual(utc(g.Job), want) {
			t.Errorf("item %d answered\n %+v\nstored\n %+v", i, utc(g.Job), want)
		}
	}
	// The deduplicated answers (a live key, an idempotency key) are the stored jobs too.
	again, err := db.JobInsertMany(ctx, []pg.JobInsert{{Queue: "q", Handler: "h", Key: str("k")},
		{Queue: "q", Handler: "h", IdempotencyKey: str("i")}})
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range again {
		stored, err := db.JobGet(ctx, got[2].ID)
		if err != nil {
			t.Fatal(err)
		}
		if !g.Deduplicated || !reflect.DeepEqual(utc(g.Job), utc(stored.Job)) {
			t.Errorf("repeat %d answered %+v (deduplicated %v), want the stored %+v", i, g.Job, g.Deduplicated, stored.Job)
		}
	}
}

func intp(v int) *int       { return &v }
func int64p(v int64) *int64 { return &v }

// utc puts every time of j in UTC, so that equal instants compare equal.
func utc(j pg.Job) pg.Job {
	in := func(t *time.Time) *time.Time {
		if t == nil {
			return nil
		}
		u := t.UTC()
		return &u
	}
	j.EligibleAt, j.LeaseExpiresAt, j.AttemptedAt, j.FinishedAt, j.ScheduleTick =
		in(j.EligibleAt), in(j.LeaseExpiresAt), in(j.AttemptedAt), in(j.FinishedAt), in(j.ScheduleTick)
	j.CreatedAt, j.UpdatedAt = j.CreatedAt.UTC(), j.UpdatedAt.UTC()
	return j
}
