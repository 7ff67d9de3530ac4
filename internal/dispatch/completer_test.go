package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
	"github.com/jackc/pgx/v5"
)

// The completer fills its statements: 200 outcomes waiting when it starts are written by
// 4 statements of 50 with one worker; with three, the overflow workers share the backlog
// (no more than 8 statements) and every outcome is applied and reported once.
func TestCompleterFillsItsStatements(t *testing.T) {
	t.Parallel()
	for _, workers := range []int{1, 3} {
		counter := &pg.StatementCounter{}
		db := pgtest.Open(t, pgtest.NewDatabase(t), pg.Options{Counter: counter, MaxConns: 8})
		eng, err := engine.New(db, engine.Config{LeaseTTL: time.Hour}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if _, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://127.0.0.1:9/"}); err != nil {
			t.Fatal(err)
		}
		jobs := make([]engine.NewJob, 200)
		for i := range jobs {
			jobs[i] = engine.NewJob{Handler: "h", Input: json.RawMessage(`{}`)}
		}
		if _, err := eng.InsertJobs(ctx, jobs); err != nil {
			t.Fatal(err)
		}
		var steps []engine.Step
		for len(steps) < len(jobs) {
			got, _, err := eng.Claim(ctx, "default", 100)
			if err != nil || len(got) == 0 {
				t.Fatalf("claimed %d (%v)", len(got), err)
			}
			steps = append(steps, got...)
		}
		cfg := Config{OutcomeBatch: 50, OutcomeWorkers: workers}
		cfg.applyDefaults()
		c := newCompleter(eng, cfg, NewMetrics(nil), slog.New(slog.DiscardHandler))
		var mu sync.Mutex
		reported := map[int64]int{}
		var wg sync.WaitGroup
		for _, st := range steps { // all queued before a worker runs: the channel holds 4 batches
			wg.Add(1)
			c.submit(&st, &engine.Outcome{Kind: pg.KindDone, Label: "done"}, breakerNote{}, func(a *engine.OutcomeApplied, err error) {
				defer wg.Done()
				if err != nil || a == nil || a.Status != "done" {
					t.Errorf("job %d: applied %+v, %v", st.ID, a, err)
				}
				mu.Lock()
				reported[st.ID]++
				mu.Unlock()
			})
		}
		before := counter.Count("JobApplyOutcomes")
		c.start()
		wg.Wait()
		c.stop()
		statements := counter.Count("JobApplyOutcomes") - before
		t.Logf("%d workers: 200 outcomes in %d statements", workers, statements)
		if workers == 1 && statements != 4 || statements > 8 {
			t.Fatalf("%d workers: 200 outcomes took %d statements of at most 50", workers, statements)
		}
		for _, st := range steps {
			if reported[st.ID] != 1 {
				t.Fatalf("job %d reported %d times", st.ID, reported[st.ID])
			}
		}
	}
}

// An outcome statement held up by a row lock does not hold the process's other outcomes
// back: while one job's row is locked by another transaction, the outcomes of two other
// jobs submitted after it are written by an overflow worker; the held one is written once
// the lock goes.
func TestCompleterDoesNotHoldOutcomesBehindALockedRow(t *testing.T) {
	t.Parallel()
	pgtest.SkipOnCitus(t, "it holds a job row with a FOR UPDATE that Citus cannot run without the placement; the outcome's fencing on Citus is held by TestOutcomeWrittenAgainChangesNothing")
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	db := pgtest.Open(t, url, pg.Options{MaxConns: 8})
	eng, err := engine.New(db, engine.Config{LeaseTTL: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://127.0.0.1:9/"}); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.InsertJobs(ctx, []engine.NewJob{{Handler: "h"}, {Handler: "h"}, {Handler: "h"}}); err != nil {
		t.Fatal(err)
	}
	steps, _, err := eng.Claim(ctx, "default", 10)
	if err != nil || len(steps) != 3 {
		t.Fatalf("claimed %d (%v)", len(steps), err)
	}
	locker, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close(ctx)
	tx, err := locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE`, steps[0].ID); err != nil {
		t.Fatal(err)
	}
	cfg := Config{OutcomeWorkers: 2}
	cfg.applyDefaults()
	c := newCompleter(eng, cfg, NewMetrics(nil), slog.New(slog.DiscardHandler))
	c.start()
	defer c.stop()
	written := make(chan int64, 3)
	submit := func(st engine.Step) {
		c.submit(&st, &engine.Outcome{Kind: pg.KindDone, Label: "done"}, breakerNote{}, func(a *engine.OutcomeApplied, err error) {
			if err != nil || a == nil {
				t.Errorf("job %d: %+v %v", st.ID, a, err)
			}
			written <- st.ID
		})
	}
	submit(steps[0])
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		n, err := db.QueryInt(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first outcome statement never waited on the locked row")
		}
	}
	submit(steps[1])
	submit(steps[2])
	for range 2 {
		select {
		case id := <-written:
			if id == steps[0].ID {
				t.Fatal("the locked job's outcome was written while its row was locked")
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the outcomes behind the held statement were not written while it waited")
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-written:
		if id != steps[0].ID {
			t.Fatalf("job %d written twice", id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the held outcome was not written once the lock went")
	}
}

// A batch that the database writes one outcome at a time (one of them it refuses) reports
// each outcome as it went: the ones written as applied, the one that could not be written
// as an error. It used to report the batch's error to every outcome, the written ones
// included (and a failure other than a refusal had the whole batch written again, the
// written ones then reported as lost leases).
func TestCompleterReportsEachOutcomeOfAPartlyWrittenBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.Open(t, pgtest.NewDatabase(t), pg.Options{MaxConns: 8})
	eng, err := engine.New(db, engine.Config{LeaseTTL: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://127.0.0.1:9/"}); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.InsertJobs(ctx, []engine.NewJob{{Handler: "h"}, {Handler: "h"}, {Handler: "h"}}); err != nil {
		t.Fatal(err)
	}
	steps, _, err := eng.Claim(ctx, "default", 10)
	if err != nil || len(steps) != 3 {
		t.Fatalf("claimed %d (%v)", len(steps), err)
	}
	// The middle outcome holds what Postgres cannot store, in its answer and in the bodies
	// its failed attempt would keep: neither it nor the attempt it becomes can be written.
	unstorable := &engine.Outcome{Kind: pg.KindDone, Label: "done", Result: json.RawMessage(`{"a": "x\u0000"}`),
		Bodies: &engine.StepBodies{Response: &engine.StepBody{Text: "x\x00"}}}
	cfg := Config{OutcomeBatch: 10, OutcomeWorkers: 1}
	cfg.applyDefaults()
	c := newCompleter(eng, cfg, NewMetrics(nil), slog.New(slog.DiscardHandler))
	type report struct {
		applied *engine.OutcomeApplied
		err     error
	}
	reports := make([]report, len(steps))
	var wg sync.WaitGroup
	for i := range steps {
		o := &engine.Outcome{Kind: pg.KindDone, Label: "done"}
		if i == 1 {
			o = unstorable
		}
		wg.Add(1)
		c.submit(&steps[i], o, breakerNote{}, func(a *engine.OutcomeApplied, err error) {
			defer wg.Done()
			reports[i] = report{a, err}
		})
	}
	c.start() // all three queued: one batch
	wg.Wait()
	c.stop()
	for i, st := range steps {
		j, err := db.JobGet(ctx, st.ID)
		if err != nil {
			t.Fatal(err)
		}
		r := reports[i]
		if i == 1 {
			if r.err == nil || j.Status != "executing" {
				t.Errorf("the unstorable outcome: reported %+v, %v; job %s", r.applied, r.err, j.Status)
			}
			continue
		}
		if r.err != nil || r.applied == nil || r.applied.Status != "done" || j.Status != "done" {
			t.Errorf("outcome %d: reported %+v, %v; job %s (want applied, done)", i, r.applied, r.err, j.Status)
		}
	}
}

// A write that keeps failing with a transient error is tried a few times in all, with a
// pause growing between tries, then reported failed: one layer of retries. (The engine
// tried each statement 5 times without pause inside the completer's 5 tries: 25
// statements for one batch.)
func TestCompleterRetriesAFailingWriteInOneLayer(t *testing.T) {
	t.Parallel()
	pgtest.SkipOnCitus(t, "it makes the outcome fail with a trigger, which Citus does not support on distributed tables")
	ctx := context.Background()
	counter := &pg.StatementCounter{}
	db := pgtest.Open(t, pgtest.NewDatabase(t), pg.Options{Counter: counter, MaxConns: 8})
	eng, err := engine.New(db, engine.Config{LeaseTTL: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: "http://127.0.0.1:9/"}); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.InsertJobs(ctx, []engine.NewJob{{Handler: "h"}}); err != nil {
		t.Fatal(err)
	}
	steps, _, err := eng.Claim(ctx, "default", 10)
	if err != nil || len(steps) != 1 {
		t.Fatalf("claimed %d (%v)", len(steps), err)
	}
	// Every write of the job fails as a serialization failure would (a transient conflict).
	if _, err := db.Exec(ctx, `CREATE FUNCTION fail_transiently() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = 'serialization_failure'; END $$;
		CREATE TRIGGER fail_transiently BEFORE UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION fail_transiently()`); err != nil {
		t.Fatal(err)
	}
	cfg := Config{OutcomeWorkers: 1}
	cfg.applyDefaults()
	c := newCompleter(eng, cfg, NewMetrics(nil), slog.New(slog.DiscardHandler))
	c.start()
	defer c.stop()
	reported := make(chan error, 1)
	started := time.Now()
	c.submit(&steps[0], &engine.Outcome{Kind: pg.KindDone, Label: "done"}, breakerNote{}, func(_ *engine.OutcomeApplied, err error) {
		reported <- err
	})
	select {
	case err = <-reported:
	case <-time.After(time.Minute):
		t.Fatal("the failing write was not reported within a minute")
	}
	took := time.Since(started)
	statements := counter.Count("JobApplyOutcomes") + counter.Count("JobApplyPlainOutcomes")
	t.Logf("reported after %d outcome statements, %s: %v", statements, took.Round(time.Millisecond), err)
	if !errors.Is(err, engine.ErrRetryable) {
		t.Fatalf("reported %v, want the transient error", err)
	}
	if statements != completerTries {
		t.Fatalf("%d outcome statements for one failing batch, want %d (one layer of retries)", statements, completerTries)
	}
	var least time.Duration // the pauses' lower bounds: half of each doubling step
	for n := 1; n < completerTries; n++ {
		least += min(completerBackoffBase<<(n-1), completerBackoffMax) / 2
	}
	if took < least {
		t.Fatalf("the tries took %s, less than their pauses' least %s", took, least)
	}
}
