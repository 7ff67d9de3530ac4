package httpapi_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gendurable/gendurable/internal/httpapi"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// An API call that waits on the database past its deadline (here a row lock another
// transaction holds) is cancelled there and answers 503 with a problem, writing nothing;
// the calls that do not wait answer meanwhile, and the same call succeeds once the lock
// is gone.
func TestACallPastItsDeadlineAnswers503AndWritesNothing(t *testing.T) {
	t.Parallel()
	const deadline = 2 * time.Second
	a := newAPI(t, httpapi.Config{RequestTimeout: deadline})
	a.registerHandler("h")
	r := a.do("POST", "/v1/jobs", `{"handler": "h"}`)
	if r.status != 201 {
		t.Fatalf("insert: %d %s", r.status, r.body)
	}
	id := int64(r.json(t)["id"].(float64))

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, a.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// An update the test rolls back holds the job's row lock (on Citus too, where a FOR
	// UPDATE must name the distribution column).
	if _, err := tx.Exec(ctx, `UPDATE jobs SET updated_at = updated_at WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	before := a.snapshot()
	began := time.Now()
	r = a.do("POST", fmt.Sprintf("/v1/jobs/%d/cancel", id), "")
	took := time.Since(began)
	if r.status != 503 || r.header.Get("Content-Type") != "application/problem+json" || r.header.Get("Retry-After") == "" {
		t.Fatalf("cancel of a locked job: %d %v %s; want a 503 problem with Retry-After", r.status, r.header, r.body)
	}
	if p := r.json(t); p["type"] != "urn:gendurable:problem:timeout" {
		t.Fatalf("problem %s", r.body)
	}
	if took < deadline {
		t.Fatalf("answered 503 after %v, before the %v deadline", took, deadline)
	}
	t.Logf("the cancel answered 503 after %v (deadline %v)", took, deadline)
	// The statement was cancelled in the database before the 503 was answered. pgx's
	// default sent the cancel from a goroutine after answering: on a busy machine it
	// landed after the rollback below, and the "timed-out" cancel committed (CI, stop 40).
	if n := lockWaiters(t, conn); n != 0 {
		t.Fatalf("%d statements still wait on a lock after the 503", n)
	}
	if r := a.do("GET", fmt.Sprintf("/v1/jobs/%d", id), ""); r.status != 200 {
		t.Fatalf("a read while the row is locked: %d %s", r.status, r.body)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if after := a.snapshot(); after != before {
		t.Fatalf("the timed-out cancel wrote: %s -> %s", before, after)
	}
	if r := a.do("POST", fmt.Sprintf("/v1/jobs/%d/cancel", id), ""); r.status != 200 {
		t.Fatalf("cancel once the lock is gone: %d %s", r.status, r.body)
	}
}

// lockWaiters counts the statements of the cluster that wait on a lock, asked on conn
// (whose own transaction holds one): on Citus the wait is on a worker.
func lockWaiters(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	view := "pg_stat_activity"
	if pgtest.Citus() {
		view = "citus_stat_activity"
	}
	var n int
	if err := conn.QueryRow(context.Background(),
		`SELECT count(*) FROM `+view+` WHERE wait_event_type = 'Lock'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
