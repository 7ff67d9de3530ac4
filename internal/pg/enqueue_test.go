package pg_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// enqueueDB is a fresh database with handler "h" (max_attempts 5) and rate limit
// "tight" (burst 2), and a plain pgx connection as an application would hold.
func enqueueDB(t *testing.T) (*pg.DB, *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	db := pgtest.Open(t, url, pg.Options{})
	if _, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://127.0.0.1:1/steps"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.RateLimitUpsert(ctx, "tight", 1, 2); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return db, conn
}

// The options land in the job's columns as POST /v1/jobs would put them there.
func TestSQLEnqueueWritesTheOptions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, conn := enqueueDB(t)
	var id int64
	err := conn.QueryRow(ctx, `SELECT gendurable_enqueue('h', '{"order": 7}', '{"queue": "mail", "key": "order-7",
		"priority": 2, "delay": "1h30m", "concurrency_key": "user-7", "max_attempts": 3,
		"rate_limit": {"name": "tight", "key": "user-7", "weight": 2}}')`).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	var queue, key, ck, rl, rk, status, input string
	var priority, maxAttempts, weight int
	var delay float64
	err = conn.QueryRow(ctx, `SELECT queue, key, concurrency_key, rate_limit, rate_key, rate_weight, priority,
		max_attempts, status, input::text, extract(epoch FROM eligible_at - created_at)
		FROM jobs WHERE id = $1`, id).Scan(&queue, &key, &ck, &rl, &rk, &weight, &priority, &maxAttempts, &status, &input, &delay)
	if err != nil {
		t.Fatal(err)
	}
	if queue != "mail" || key != "order-7" || ck != "user-7" || rl != "tight" || rk != "user-7" || weight != 2 ||
		priority != 2 || maxAttempts != 3 || status != "runnable" || input != `{"order": 7}` {
		t.Fatalf("job columns: queue=%s key=%s ck=%s rl=%s rk=%s weight=%d priority=%d max_attempts=%d status=%s input=%s",
			queue, key, ck, rl, rk, weight, priority, maxAttempts, status, input)
	}
	if delay < 5400 || delay > 5400+60 {
		t.Fatalf("eligible_at is %.0fs after created_at, want 1h30m", delay)
	}
	if n, err := db.QueryInt(ctx, `SELECT count(*) FROM queues WHERE name = 'mail'`); err != nil || n != 1 {
		t.Fatalf("queue mail created: %d %v", n, err)
	}

	// Defaults: queue "default", priority 5, the handler's max_attempts, runnable now.
	var plain int64
	if err := conn.QueryRow(ctx, `SELECT gendurable_enqueue('h')`).Scan(&plain); err != nil {
		t.Fatal(err)
	}
	err = conn.QueryRow(ctx, `SELECT queue, priority, max_attempts, input::text FROM jobs WHERE id = $1`, plain).
		Scan(&queue, &priority, &maxAttempts, &input)
	if err != nil || queue != "default" || priority != 5 || maxAttempts != 5 || input != "{}" {
		t.Fatalf("defaults: queue=%s priority=%d max_attempts=%d input=%s err=%v", queue, priority, maxAttempts, input, err)
	}

	// A key a live job holds answers that job, and writes nothing.
	var again int64
	if err := conn.QueryRow(ctx, `SELECT gendurable_enqueue('h', '{}', '{"key": "order-7"}')`).Scan(&again); err != nil {
		t.Fatal(err)
	}
	if again != id {
		t.Fatalf("same live key: got job %d, want %d", again, id)
	}
	if n, _ := db.QueryInt(ctx, `SELECT count(*) FROM jobs`); n != 2 {
		t.Fatalf("jobs: %d, want 2", n)
	}
	// run_at is taken as given.
	var later int64
	var runAt time.Time
	if err := conn.QueryRow(ctx, `SELECT gendurable_enqueue('h', '{}', '{"run_at": "2030-01-02T03:04:05Z"}')`).Scan(&later); err != nil {
		t.Fatal(err)
	}
	err = conn.QueryRow(ctx, `SELECT eligible_at FROM jobs WHERE id = $1`, later).Scan(&runAt)
	if err != nil || !runAt.Equal(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("run_at: %v %v", runAt, err)
	}
}

// jobsListener is a connection to the database at url that LISTENs on pg.JobsChannel,
// closed with the test.
func jobsListener(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	listener, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = listener.Close(context.Background()) })
	if _, err := listener.Exec(ctx, "LISTEN "+pg.JobsChannel); err != nil {
		t.Fatal(err)
	}
	return listener
}

// A job enqueued in a transaction that rolls back never existed: no row, no queue, and
// no notification reaches a listener; one that commits notifies at commit, not before.
func TestSQLEnqueueIsTransactional(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, conn := enqueueDB(t)
	listener := jobsListener(t, conn.Config().ConnString())
	noNotification := func(what string) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		if n, err := listener.WaitForNotification(wctx); err == nil {
			t.Fatalf("%s: notification %q", what, n.Payload)
		}
	}

	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT gendurable_enqueue('h', '{}', '{"queue": "rolled"}')`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := db.QueryInt(ctx, `SELECT count(*) FROM jobs`); n != 0 {
		t.Fatalf("rolled back: %d jobs", n)
	}
	if n, _ := db.QueryInt(ctx, `SELECT count(*) FROM queues WHERE name = 'rolled'`); n != 0 {
		t.Fatal("rolled back: the queue was created")
	}
	noNotification("rolled back")

	tx, err = conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := tx.QueryRow(ctx, `SELECT gendurable_enqueue('h', '{}', '{"queue": "committed"}')`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if n, _ := db.QueryInt(ctx, `SELECT count(*) FROM jobs`); n != 0 {
		t.Fatalf("before commit another session sees %d jobs", n)
	}
	noNotification("before commit")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := listener.WaitForNotification(wctx)
	// On Citus the payload also names the job's placement (" @915"), which the server's
	// listener reads and cuts off (docs/citus.md, "Which shards a claim visits").
	if queue, _, _ := strings.Cut(valueOrZero(n).Payload, " @"); err != nil || queue != "committed" {
		t.Fatalf("after commit: notification %v, %v", n, err)
	}
	if got, _ := db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE id = $1 AND status = 'runnable'`, id); got != 1 {
		t.Fatal("after commit the job is not there")
	}
}

// Each bad argument is refused with SQLSTATE 22023, the field as the error's column and
// in its message, and nothing is written.
func TestSQLEnqueueRefusesBadOptions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, conn := enqueueDB(t)
	cases := []struct {
		handler, input, options string
		field, message          string
	}{
		{"nope", `{}`, `{}`, "handler", `no handler named "nope" is registered`},
		{"bad name!", `{}`, `{}`, "handler", "must be 1-128 characters"},
		{"h", `{}`, `[1]`, "options", "must be a JSON object"},
		{"h", `{}`, `{"queu": "x"}`, "options", "unknown members: queu"},
		{"h", `{}`, `{"queue": "a b"}`, "queue", "must be 1-128 characters"},
		{"h", `{}`, `{"queue": 7}`, "queue", "must be a string"},
		{"h", `{}`, `{"key": ""}`, "key", "must be 1-512 bytes"},
		{"h", `{}`, `{"key": "` + strings.Repeat("k", 513) + `"}`, "key", "must be 1-512 bytes"},
		{"h", `{}`, `{"concurrency_key": ""}`, "concurrency_key", "must be 1-512 bytes"},
		{"h", `{}`, `{"priority": 12}`, "priority", "must be between 0 (most urgent) and 9, got 12"},
		{"h", `{}`, `{"priority": -1}`, "priority", "must be between 0 (most urgent) and 9, got -1"},
		{"h", `{}`, `{"priority": 1.5}`, "priority", "must be an integer"},
		{"h", `{}`, `{"priority": "1"}`, "priority", "must be an integer"},
		{"h", `{}`, `{"max_attempts": 0}`, "max_attempts", "must be between 1 and 1000, got 0"},
		{"h", `{}`, `{"max_attempts": 1e30}`, "max_attempts", "must be between 1 and 1000"},
		{"h", `{}`, `{"delay": "5 minutes"}`, "delay", `must be a duration such as "500ms"`},
		{"h", `{}`, `{"delay": "-5s"}`, "delay", "must not be negative"},
		{"h", `{}`, `{"delay": "9999999999h"}`, "delay", "is longer than a duration can be"},
		{"h", `{}`, `{"delay": "1s", "run_at": "2030-01-01T00:00:00Z"}`, "delay", "give run_at or delay, not both"},
		{"h", `{}`, `{"run_at": "tomorrow-ish"}`, "run_at", "must be a timestamp"},
		{"h", `{}`, `{"rate_limit": "tight"}`, "rate_limit", "must be an object"},
		{"h", `{}`, `{"rate_limit": {"name": "tight", "wieght": 1}}`, "rate_limit", "unknown members: wieght"},
		{"h", `{}`, `{"rate_limit": {"key": "k"}}`, "rate_limit/name", "must be 1-128 characters"},
		{"h", `{}`, `{"rate_limit": {"name": "loose"}}`, "rate_limit/name", `no rate limit named "loose" exists`},
		{"h", `{}`, `{"rate_limit": {"name": "tight", "weight": -2}}`, "rate_limit/weight", "must be at least 1"},
		{"h", `{}`, `{"rate_limit": {"name": "tight", "weight": 3}}`, "rate_limit/weight", `weight 3 can never fit: rate limit "tight" has burst 2`},
		{"h", `{}`, `{"rate_limits": {"name": "tight"}}`, "rate_limits", "must be an array"},
		{"h", `{}`, `{"rate_limit": {"name": "tight"}, "rate_limits": [{"name": "tight"}]}`, "rate_limits", "give rate_limit or rate_limits, not both"},
		{"h", `{}`, `{"rate_limits": [{"name": "tight"}, 7]}`, "rate_limits/1", "must be an object"},
		{"h", `{}`, `{"rate_limits": [{"name": "tight"}, {"name": "tight", "wieght": 1}]}`, "rate_limits/1", "unknown members: wieght"},
		{"h", `{}`, `{"rate_limits": [{"name": "tight"}, {"key": "k"}]}`, "rate_limits/1/name", "must be 1-128 characters"},
		{"h", `{}`, `{"rate_limits": [{"name": "tight"}, {"name": "loose"}]}`, "rate_limits/1/name", `no rate limit named "loose" exists`},
		{"h", `{}`, `{"rate_limits": [{"name": "loose"}, {"name": "tight"}]}`, "rate_limits/0/name", `no rate limit named "loose" exists`},
		{"h", `{}`, `{"rate_limits": [{"name": "tight"}, {"name": "tight", "key": "k", "weight": 0.5}]}`, "rate_limits/1/weight", "must be an integer"},
		{"h", `{}`, `{"rate_limits": [{"name": "tight"}, {"name": "tight", "key": "k", "weight": 3}]}`, "rate_limits/1/weight", `weight 3 can never fit`},
		{"h", `{}`, `{"rate_limits": [{"name": "tight", "key": "k"}, {"name": "tight", "key": "k"}]}`, "rate_limits/1", "twice"},
		{"h", `{}`, `{"rate_limits": [{"name": "tight", "key": "1"}, {"name": "tight", "key": "2"}, {"name": "tight", "key": "3"},
			{"name": "tight", "key": "4"}, {"name": "tight", "key": "5"}, {"name": "tight", "key": "6"}, {"name": "tight", "key": "7"},
			{"name": "tight", "key": "8"}, {"name": "tight", "key": "9"}]}`, "rate_limits", "more than the 8 a job may name"},
		{"h", `{}`, `{"debounce": "k"}`, "debounce", "must be an object"},
		{"h", `{}`, `{"debounce": {"key": "k", "period": "1s", "wait": "1m"}}`, "debounce", "unknown members: wait"},
		{"h", `{}`, `{"debounce": {"period": "1s"}}`, "debounce/key", "must be 1-512 bytes"},
		{"h", `{}`, `{"debounce": {"key": "k"}}`, "debounce/period", "must be a duration"},
		{"h", `{}`, `{"debounce": {"key": "k", "period": "0"}}`, "debounce/period", "must be positive"},
		{"h", `{}`, `{"debounce": {"key": "k", "period": "1s", "max_wait": "soon"}}`, "debounce/max_wait", "must be a duration"},
		{"h", `{}`, `{"debounce": {"key": "k", "period": "1s"}, "key": "x"}`, "debounce", "give key or debounce, not both"},
		{"h", `{}`, `{"debounce": {"key": "k", "period": "1s"}, "delay": "1s"}`, "debounce", "give no run_at or delay"},
	}
	for _, c := range cases {
		var id int64
		err := conn.QueryRow(ctx, `SELECT gendurable_enqueue($1, $2::jsonb, $3::jsonb)`, c.handler, c.input, c.options).Scan(&id)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) {
			t.Errorf("%s %s: want an error, got id %d, %v", c.handler, c.options, id, err)
			continue
		}
		if pgErr.Code != "22023" || pgErr.ColumnName != c.field || !strings.Contains(pgErr.Message, c.message) ||
			!strings.HasPrefix(pgErr.Message, "gendurable_enqueue: "+c.field+": ") {
			t.Errorf("%s %s: got %s column=%q %q; want 22023 column=%q containing %q",
				c.handler, c.options, pgErr.Code, pgErr.ColumnName, pgErr.Message, c.field, c.message)
		}
	}
	if n, _ := db.QueryInt(ctx, `SELECT count(*) FROM jobs`); n != 0 {
		t.Fatalf("refused calls wrote %d jobs", n)
	}
	if n, _ := db.QueryInt(ctx, `SELECT count(*) FROM queues`); n != 0 {
		t.Fatalf("refused calls wrote %d queues", n)
	}
}

// rate_limits puts its first limit in the rate_limit columns and the others in
// extra_rate_limits, as POST /v1/jobs does.
func TestSQLEnqueueSeveralRateLimits(t *testing.T) {
	t.Parallel()
	pgtest.SkipOnCitus(t, "it enqueues with several rate limits, which gendurable_enqueue refuses on Citus (TestCitusSQLEnqueuePlacesTheJob)")
	ctx := context.Background()
	db, conn := enqueueDB(t)
	if _, err := db.RateLimitUpsert(ctx, "daily", 0, 100); err != nil {
		t.Fatal(err)
	}
	var id int64
	err := conn.QueryRow(ctx, `SELECT gendurable_enqueue('h', '{}', '{"rate_limits": [{"name": "tight", "key": "user-7", "weight": 2},
		{"name": "daily", "weight": 5}, {"name": "tight", "key": "tenant-1"}]}')`).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	job, err := db.JobGet(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	want := []pg.RateLimitUse{{Name: "daily", Key: "", Weight: 5}, {Name: "tight", Key: "tenant-1", Weight: 1}}
	if job.RateLimit == nil || *job.RateLimit != "tight" || job.RateKey == nil || *job.RateKey != "user-7" || job.RateWeight != 2 ||
		!slices.Equal(job.ExtraRateLimits, want) {
		t.Fatalf("job limits: %v %v %d, extra %+v; want tight/user-7/2 then %+v", job.RateLimit, job.RateKey, job.RateWeight,
			job.ExtraRateLimits, want)
	}
	// One element is the one-limit form: nothing extra stored.
	if err := conn.QueryRow(ctx, `SELECT gendurable_enqueue('h', '{}', '{"rate_limits": [{"name": "daily"}]}')`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if job, err = db.JobGet(ctx, id); err != nil || *job.RateLimit != "daily" || job.RateKey != nil || job.ExtraRateLimits != nil {
		t.Fatalf("one-element rate_limits: %+v %v", job.Job, err)
	}
}

// A debounced enqueue collapses into the pending job of its key: same id, the latest
// input, eligible a period after the call but never past max_wait after the first.
func TestSQLEnqueueDebounce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, conn := enqueueDB(t)
	enqueue := func(input, options string) int64 {
		t.Helper()
		var id int64
		if err := conn.QueryRow(ctx, `SELECT gendurable_enqueue('h', $1::jsonb, $2::jsonb)`, input, options).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	first := enqueue(`{"n": 1}`, `{"debounce": {"key": "user-7", "period": "1h", "max_wait": "90m"}}`)
	// The database's own clock: eligible_at is a period after the job's creation.
	if n, err := db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE id = $1 AND debounce_key = 'user-7'
		AND eligible_at - created_at BETWEEN interval '1 hour' AND interval '1 hour 1 minute'
		AND debounce_deadline - created_at BETWEEN interval '90 minutes' AND interval '91 minutes'`, first); err != nil || n != 1 {
		t.Fatalf("first enqueue: eligible_at or deadline not as asked (%d, %v)", n, err)
	}
	// Pretend the first was 40 minutes ago: the next call would push it to 1 h from now
	// (100 min after the first), past max_wait: it is held at the deadline.
	// (In UTC, where the arithmetic is immutable: Citus refuses a stable function of a
	// column in an UPDATE.)
	if _, err := db.Exec(ctx, `UPDATE jobs SET created_at = ((created_at AT TIME ZONE 'UTC') - interval '40 minutes') AT TIME ZONE 'UTC',
		eligible_at = ((eligible_at AT TIME ZONE 'UTC') - interval '40 minutes') AT TIME ZONE 'UTC',
		debounce_deadline = ((debounce_deadline AT TIME ZONE 'UTC') - interval '40 minutes') AT TIME ZONE 'UTC'`); err != nil {
		t.Fatal(err)
	}
	if again := enqueue(`{"n": 2}`, `{"debounce": {"key": "user-7", "period": "1h"}}`); again != first {
		t.Fatalf("second enqueue made job %d, want the pending %d", again, first)
	}
	if n, err := db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE id = $1 AND input = '{"n": 2}'
		AND eligible_at = debounce_deadline`, first); err != nil || n != 1 {
		t.Fatalf("second enqueue: input not replaced or eligible_at not held at the deadline (%d, %v)", n, err)
	}
	if other := enqueue(`{}`, `{"debounce": {"key": "user-8", "period": "1s"}}`); other == first {
		t.Fatal("another debounce key answered the same job")
	}
	if n, _ := db.QueryInt(ctx, `SELECT count(*) FROM jobs`); n != 2 {
		t.Fatalf("%d jobs, want 2", n)
	}
}

// A debounce key beside a concurrency key, through gendurable_enqueue and the API in
// turn: one pending job per debounce key, whichever of the two made it and whatever
// concurrency key each call names (on Citus the job lives at its concurrency key's
// placement, and the debounce key's holder row finds it). Once the job is claimed, the
// next call makes a new one.
func TestSQLEnqueueDebounceBesideAConcurrencyKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, conn := enqueueDB(t)
	enqueue := func(options string) int64 {
		t.Helper()
		var id int64
		if err := conn.QueryRow(ctx, `SELECT gendurable_enqueue('h', '{}', $1::jsonb)`, options).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	api := func(concurrencyKey *string) pg.JobInserted {
		t.Helper()
		got, err := db.JobInsertMany(ctx, []pg.JobInsert{{Queue: "default", Handler: "h", ConcurrencyKey: concurrencyKey,
			Debounce: &pg.Debounce{Key: "sync-7", Period: time.Hour}}})
		if err != nil {
			t.Fatal(err)
		}
		return got[0]
	}
	ck := "tenant-7"
	first := enqueue(`{"concurrency_key": "tenant-7", "debounce": {"key": "sync-7", "period": "1h"}}`)
	if pgtest.Citus() && first%pg.Placements != int64(pg.PlacementOfKey(ck)) {
		t.Fatalf("job %d lives at %d, want its concurrency key's placement %d", first, first%pg.Placements, pg.PlacementOfKey(ck))
	}
	if got := api(nil); !got.Debounced || got.ID != first {
		t.Fatalf("the API without a concurrency key: debounced %v, job %d; want %d", got.Debounced, got.ID, first)
	}
	if got := enqueue(`{"debounce": {"key": "sync-7", "period": "1h"}}`); got != first {
		t.Fatalf("gendurable_enqueue without a concurrency key: job %d, want %d", got, first)
	}
	if got := api(&ck); !got.Debounced || got.ID != first {
		t.Fatalf("the API with the concurrency key: debounced %v, job %d; want %d", got.Debounced, got.ID, first)
	}
	// As a claim would: attempted, the job no longer holds the debounce key.
	if _, err := db.Exec(ctx, `UPDATE jobs SET status = 'executing', attempted_at = now(),
		lease_token = '00000000-0000-0000-0000-000000000001', lease_expires_at = now() + interval '1 hour' WHERE id = $1`, first); err != nil {
		t.Fatal(err)
	}
	second := enqueue(`{"debounce": {"key": "sync-7", "period": "1h"}}`)
	if second == first {
		t.Fatal("a call after the claim answered the claimed job")
	}
	if got := api(&ck); !got.Debounced || got.ID != second {
		t.Fatalf("the API with the concurrency key after the claim: debounced %v, job %d; want %d", got.Debounced, got.ID, second)
	}
	if got := enqueue(`{"concurrency_key": "tenant-7", "debounce": {"key": "sync-7", "period": "1h"}}`); got != second {
		t.Fatalf("gendurable_enqueue with the concurrency key after the claim: job %d, want %d", got, second)
	}
	if n, err := db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE debounce_key = 'sync-7'`); err != nil || n != 2 {
		t.Fatalf("%d jobs hold sync-7 (%v), want 2", n, err)
	}
}

// Durations read as Go reads them.
func TestSQLEnqueueDurations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, conn := enqueueDB(t)
	for text, want := range map[string]int64{"0": 0, "500ms": 500, "30s": 30000, "1h30m": 5400000,
		"1.5s": 1500, ".5m": 30000, "1500us": 1, "999999ns": 0, "2h45m10.5s": 9910500, "+1m": 60000} {
		var got int64
		if err := conn.QueryRow(ctx, `SELECT gendurable_duration_ms('delay', $1)`, text).Scan(&got); err != nil || got != want {
			t.Errorf("%q: got %d (%v), want %d", text, got, err, want)
		}
	}
}

// valueOrZero is *n, or the zero notification for nil.
func valueOrZero(n *pgconn.Notification) pgconn.Notification {
	if n == nil {
		return pgconn.Notification{}
	}
	return *n
}

// A caller in a REPEATABLE READ transaction whose snapshot predates a job that took a key
// fails with a serialization failure when it enqueues the key, rather than making a second
// live job of it: on plain PostgreSQL the unique index meets the row its snapshot missed;
// on Citus the same for a key at its own placement, and for a displaced key (beside a
// concurrency key) the key's holder row (migrations/citus/0029).
func TestSQLEnqueueUnderRepeatableReadMeetsTheKeysLaterHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, conn := enqueueDB(t)
	for _, c := range []struct{ key, options string }{
		{"order-1", `{"key": "order-1"}`},
		{"order-2", `{"key": "order-2", "concurrency_key": "user-2"}`},
	} {
		tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `SELECT count(*) FROM jobs`); err != nil { // the snapshot
			t.Fatal(err)
		}
		if _, err := db.JobInsertMany(ctx, []pg.JobInsert{{Queue: "default", Handler: "h", Key: &c.key}}); err != nil {
			t.Fatal(err)
		}
		_, err = tx.Exec(ctx, `SELECT gendurable_enqueue('h', '{}', $1::jsonb)`, c.options)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "40001" {
			t.Errorf("%s: enqueued in a snapshot that missed the key's holder: %v; want a serialization failure (40001)", c.options, err)
		}
		_ = tx.Rollback(ctx)
		live, err := db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE key = $1 AND status IN ('runnable', 'executing', 'awaiting')`, c.key)
		if err != nil || live != 1 {
			t.Fatalf("%s: %d live jobs of the key (%v), want 1", c.options, live, err)
		}
	}
}
