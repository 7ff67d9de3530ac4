package dispatch_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gendurable/gendurable/internal/dispatch"
	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
	"github.com/gendurable/gendurable/webhook"
)

// A job enqueued with gendurable_enqueue from an application's transaction runs through
// the dispatcher to the webhook when the transaction commits, woken by the NOTIFY sent at
// commit (polling is set to a minute, so only the notification can explain a prompt run);
// one whose transaction rolls back is never dispatched.
func TestSQLEnqueueCommitRunsRollbackDoesNot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	db := pgtest.Open(t, url, pg.Options{MaxConns: 10})
	eng, err := engine.New(db, engine.Config{LeaseTTL: 30 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{db: db, eng: eng}
	rec := newReceiver(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		answer(w, webhook.Response{Done: &webhook.Done{Result: req.Job.Input}})
	})
	h.handler(t, "billing", rec.URL, 3)
	startDispatcher(t, eng, dispatch.Config{PollMin: time.Minute, PollMax: time.Minute, QueueRefresh: time.Minute})

	app, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(ctx)
	enqueue := func(input string, commit bool) int64 {
		t.Helper()
		tx, err := app.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var id int64
		if err := tx.QueryRow(ctx, `SELECT gendurable_enqueue('billing', $1::jsonb, '{"queue": "invoices"}')`, input).Scan(&id); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		return id
	}

	rolledBack := enqueue(`{"invoice": 1}`, false)
	committed := enqueue(`{"invoice": 2}`, true)
	// Well under the minute of polling: only the commit's NOTIFY can have woken the feeder.
	j := waitJob(t, db, committed, 20*time.Second, hasStatus("done"))
	if !jsonEqual(j.Result, `{"invoice": 2}`) {
		t.Fatalf("result %s, want the input", j.Result)
	}
	if _, err := db.JobGet(ctx, rolledBack); err != pg.ErrNotFound {
		t.Fatalf("the rolled-back job %d: %v, want not found", rolledBack, err)
	}
	calls := rec.Calls()
	if len(calls) != 1 || calls[0].Job.ID != committed {
		t.Fatalf("webhook calls: %+v, want one for job %d", calls, committed)
	}
}
