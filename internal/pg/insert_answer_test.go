package pg_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync"
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

// A plain batch (no live key, idempotency key, debounce key or rate limit) goes to
// JobInsertPlain: it must write, and answer, what JobInsertMany writes for the same
// items, whatever optional field an item sets and whatever state its handler is in (a
// paused handler's and an open breaker's jobs go in parked, the batch's first job of an
// open breaker at its next probe), and it creates an unknown queue.
func TestPlainInsertWritesWhatTheGeneralInsertWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	counter := &pg.StatementCounter{}
	db := pgtest.Open(t, pgtest.NewDatabase(t), pg.Options{Counter: counter})
	for _, name := range []string{"h", "paused", "open"} {
		if _, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: name, URL: "http://example.test/", NewSecret: "whsec_x",
			MaxAttempts: intp(7)}); err != nil {
			t.Fatal(err)
		}
	}
	probeAt := time.Now().Add(5 * time.Second).Truncate(time.Microsecond)
	if _, err := db.Exec(ctx, `UPDATE handlers SET paused_at = now() WHERE name = 'paused'`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `UPDATE handlers SET breaker_state = 'open', breaker_opened_at = now(), breaker_next_probe_at = $1 WHERE name = 'open'`, probeAt); err != nil {
		t.Fatal(err)
	}
	parent, err := db.JobInsertMany(ctx, []pg.JobInsert{{Queue: "q", Handler: "h"}})
	if err != nil {
		t.Fatal(err)
	}
	runAt := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	batch := func(queue string) []pg.JobInsert {
		return []pg.JobInsert{
			{Queue: queue, Handler: "open"},
			{Queue: queue, Handler: "h", Input: json.RawMessage(`{ "b": 1,  "a": [1, 2.50, 1e2], "b": 2 }`)},
			{Queue: queue, Handler: "h", Priority: intp(0), DelayMS: int64p(60_000), ConcurrencyKey: str("c"),
				MaxAttempts: intp(2), ParentID: &parent[0].ID},
			{Queue: queue, Handler: "h", RunAt: &runAt, Priority: intp(9)},
			{Queue: queue, Handler: "paused"},
			{Queue: queue, Handler: "open"},
		}
	}
	counter.Reset()
	general, err := db.JobInsertManyGeneral(ctx, batch("general"))
	if err != nil {
		t.Fatal(err)
	}
	if got := counter.Snapshot(); got["JobInsertMany"] != 1 {
		t.Fatalf("the general insert ran %v", got)
	}
	counter.Reset()
	plain, err := db.JobInsertMany(ctx, batch("plain"))
	if err != nil {
		t.Fatal(err)
	}
	if got := counter.Snapshot(); got["JobInsertPlain"] != 1 || len(got) != 1 {
		t.Fatalf("a plain batch ran %v, want one JobInsertPlain", got)
	}
	// What the statement decides from now() or random() is compared as an offset from
	// the job's creation, within the parked range.
	offset := func(j pg.Job) time.Duration { return j.EligibleAt.Sub(j.CreatedAt) }
	for i := range plain {
		stored, err := db.JobGet(ctx, plain[i].ID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(utc(plain[i].Job), utc(stored.Job)) {
			t.Errorf("item %d answered\n %+v\nstored\n %+v", i, utc(plain[i].Job), utc(stored.Job))
		}
		g, p := general[i].Job, stored.Job
		if p.Queue != "plain" || g.Queue != "general" {
			t.Fatalf("item %d in queues %q and %q", i, g.Queue, p.Queue)
		}
		parked := g.LeaseOwner != nil && i > 0
		if parked {
			if d := offset(p); d < 150*time.Second || d > 300*time.Second {
				t.Errorf("item %d parked %v after its creation, want 150-300 s", i, d)
			}
			p.EligibleAt = g.EligibleAt
		} else if d := offset(g) - offset(p); d < -time.Second || d > time.Second {
			t.Errorf("item %d eligible %v after its creation, the general insert %v", i, offset(p), offset(g))
		} else {
			p.EligibleAt = g.EligibleAt
		}
		p.ID, p.Queue, p.CreatedAt, p.UpdatedAt = g.ID, g.Queue, g.CreatedAt, g.UpdatedAt
		if !reflect.DeepEqual(utc(p), utc(g)) {
			t.Errorf("item %d: the plain insert wrote\n %+v\nthe general one\n %+v", i, utc(p), utc(g))
		}
	}
	if !plain[0].EligibleAt.Equal(probeAt) || plain[0].LeaseOwner == nil || *plain[0].LeaseOwner != "breaker:open" {
		t.Errorf("the first job of the open breaker: eligible %v, lease owner %v; want the probe at %v", plain[0].EligibleAt, plain[0].LeaseOwner, probeAt)
	}
	if n, err := db.QueryInt(ctx, `SELECT count(*) FROM queues WHERE name = 'plain'`); err != nil || n != 1 {
		t.Fatalf("queue plain: %d rows (%v)", n, err)
	}
	// One unknown handler refuses the whole plain batch, naming the item; nothing is written.
	_, err = db.JobInsertMany(ctx, []pg.JobInsert{{Queue: "refused", Handler: "h"}, {Queue: "refused", Handler: "nope"}})
	var refused *pg.InsertRefusedError
	if !errors.As(err, &refused) || len(refused.Problems) != 1 || refused.Problems[0].Index != 1 || refused.Problems[0].Field != "handler" {
		t.Fatalf("a plain batch with an unknown handler: %v, want a refusal of item 1's handler", err)
	}
	if n, err := db.QueryInt(ctx, `SELECT (SELECT count(*) FROM jobs WHERE queue = 'refused') + (SELECT count(*) FROM queues WHERE name = 'refused')`); err != nil || n != 0 {
		t.Fatalf("the refused batch wrote %d rows (%v)", n, err)
	}
}

// The plain insert answers without each row's request position: item k's job is the k-th
// smallest id of the batch. Batches inserted at once from several connections draw their
// ids from one sequence in turns; each answer must still be its item's job, stored with
// the item's input.
func TestPlainInsertAnswersInRequestOrderBesideOtherBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.Open(t, pgtest.NewDatabase(t), pg.Options{MaxConns: 8})
	if _, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://example.test/", NewSecret: "whsec_x"}); err != nil {
		t.Fatal(err)
	}
	const clients, batches, size = 6, 5, 400
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		wg.Go(func() {
			for b := range batches {
				items := make([]pg.JobInsert, size)
				for k := range items {
					items[k] = pg.JobInsert{Queue: "q" + strconv.Itoa(k%3), Handler: "h",
						Input: json.RawMessage(fmt.Sprintf(`{"b": %d, "c": %d, "k": %d}`, b, c, k))} // as jsonb writes it
				}
				got, err := db.JobInsertMany(ctx, items)
				if err != nil {
					errs <- err
					return
				}
				for k := range got {
					if string(got[k].Input) != string(items[k].Input) || got[k].Queue != items[k].Queue {
						errs <- fmt.Errorf("client %d batch %d item %d answered job %d with input %s in %s", c, b, k, got[k].ID, got[k].Input, got[k].Queue)
						return
					}
					if k > 0 && got[k].ID <= got[k-1].ID {
						errs <- fmt.Errorf("client %d batch %d: item %d has id %d after %d", c, b, k, got[k].ID, got[k-1].ID)
						return
					}
				}
				stored, err := db.QueryStrings(ctx, `SELECT input::text, queue FROM jobs WHERE id = $1`, got[size-1].ID)
				if err != nil || stored[0][0] != string(items[size-1].Input) || stored[0][1] != items[size-1].Queue {
					errs <- fmt.Errorf("client %d batch %d: the last job stored %v (%v)", c, b, stored, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
