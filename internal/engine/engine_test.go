package engine_test

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// testEngine is an engine on a fresh database with handler "h" registered. The handler's
// URL is never called: these tests drive claims and outcomes themselves.
type testEngine struct {
	*engine.Engine
	db  *pg.DB
	url string
	// counter counts the statements the engine's pool runs.
	counter *pg.StatementCounter
}

func newTestEngine(t *testing.T, cfg engine.Config) testEngine {
	t.Helper()
	url := pgtest.NewDatabase(t)
	counter := &pg.StatementCounter{}
	db := pgtest.Open(t, url, pg.Options{Counter: counter})
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = time.Minute // long enough that no lease expires under load
	}
	eng, err := engine.New(db, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	maxAttempts, base := 3, 10
	if _, err := db.HandlerUpsert(context.Background(), pg.HandlerUpsert{Name: "h", URL: "http://127.0.0.1:9/",
		MaxAttempts: &maxAttempts, BackoffBaseMS: &base}); err != nil {
		t.Fatal(err)
	}
	return testEngine{Engine: eng, db: db, url: url, counter: counter}
}

func (te testEngine) insert(t *testing.T, j engine.NewJob) int64 {
	t.Helper()
	if j.Handler == "" {
		j.Handler = "h"
	}
	got, err := te.InsertJob(context.Background(), j)
	if err != nil {
		t.Fatal(err)
	}
	return got.ID
}

// claim claims the one runnable step of queue "default" and fails the test otherwise.
func (te testEngine) claim(t *testing.T) engine.Step {
	t.Helper()
	steps, _, err := te.Claim(context.Background(), "default", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 1 {
		t.Fatalf("claimed %d steps, want 1", len(steps))
	}
	return steps[0]
}

func (te testEngine) signal(t *testing.T, id int64, name string) engine.SignalSent {
	t.Helper()
	got, err := te.Signal(context.Background(), engine.SignalTarget{JobID: &id}, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func (te testEngine) apply(t *testing.T, st engine.Step, o engine.Outcome) {
	t.Helper()
	if _, err := te.ApplyOutcome(context.Background(), engine.StepOutcome{JobID: st.ID, Token: st.LeaseToken, Outcome: o}); err != nil {
		t.Fatal(err)
	}
}

func (te testEngine) job(t *testing.T, id int64) pg.JobDetail {
	t.Helper()
	j, err := te.db.JobGet(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func wakeOf(j pg.JobDetail) string {
	if j.Wake == nil {
		return ""
	}
	return *j.Wake
}

func await(names ...string) engine.Outcome {
	return engine.Outcome{Kind: pg.KindAwait, Label: "await", Awaiting: names}
}

// An await parks unless a signal it names (any signal, when it names none) arrived after
// the step was claimed, or waits unseen behind the per-step cap. A signal it does not name
// neither wakes the park nor, later, the parked job.
func TestAwaitIsWokenOnlyByASignalItNames(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		signalCap  int
		before     []string // delivered before the claim
		during     []string // delivered while the step runs
		awaits     []string
		wantStatus string
	}{
		{name: "nothing arrives", awaits: []string{"go"}, wantStatus: "awaiting"},
		{name: "another name arrives", during: []string{"noise"}, awaits: []string{"go"}, wantStatus: "awaiting"},
		{name: "many other names arrive", during: []string{"a", "b", "c", "a"}, awaits: []string{"go"}, wantStatus: "awaiting"},
		{name: "the named signal arrives", during: []string{"go"}, awaits: []string{"go"}, wantStatus: "runnable"},
		{name: "noise then the named signal", during: []string{"noise", "go"}, awaits: []string{"go"}, wantStatus: "runnable"},
		{name: "one of several names", during: []string{"noise", "stop"}, awaits: []string{"go", "stop"}, wantStatus: "runnable"},
		{name: "any signal when no name is given", during: []string{"noise"}, wantStatus: "runnable"},
		{name: "seen signals do not wake", before: []string{"go"}, awaits: []string{"go"}, wantStatus: "awaiting"},
		{name: "an unseen named signal behind the cap wakes", signalCap: 2, before: []string{"a", "b", "go"},
			awaits: []string{"go"}, wantStatus: "runnable"},
		{name: "unseen other names behind the cap do not", signalCap: 2, before: []string{"a", "b", "c"},
			awaits: []string{"go"}, wantStatus: "awaiting"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			te := newTestEngine(t, engine.Config{SignalCap: tc.signalCap})
			id := te.insert(t, engine.NewJob{})
			for _, s := range tc.before {
				te.signal(t, id, s)
			}
			st := te.claim(t)
			for _, s := range tc.during {
				te.signal(t, id, s)
			}
			te.apply(t, st, await(tc.awaits...))
			j := te.job(t, id)
			if j.Status != tc.wantStatus {
				t.Fatalf("status %s, want %s", j.Status, tc.wantStatus)
			}
			wantWake := ""
			if tc.wantStatus == "runnable" {
				wantWake = "signal"
			}
			if wakeOf(j) != wantWake || j.Step != 1 {
				t.Fatalf("wake %q step %d, want wake %q step 1", wakeOf(j), j.Step, wantWake)
			}
			if tc.wantStatus != "awaiting" {
				return
			}
			// Parked: a name it does not wait for leaves it parked, one it names wakes it.
			if len(tc.awaits) > 0 {
				if s := te.signal(t, id, "unrelated"); s.Woke {
					t.Fatal("a signal the await does not name woke the parked job")
				}
			}
			if s := te.signal(t, id, tc.awaits[0]); !s.Woke {
				t.Fatal("the named signal did not wake the parked job")
			}
			if j := te.job(t, id); j.Status != "runnable" || wakeOf(j) != "signal" {
				t.Fatalf("after the named signal: %s wake %q", j.Status, wakeOf(j))
			}
		})
	}
}

// The late-signal names are the step's own: a later step starts with none recorded.
func TestLateSignalNamesDoNotCarryOverToTheNextStep(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, engine.Config{})
	id := te.insert(t, engine.NewJob{})
	st := te.claim(t)
	te.signal(t, id, "go") // arrives during step 0, which answers next
	te.apply(t, st, engine.Outcome{Kind: pg.KindNext, Label: "next"})
	st = te.claim(t) // step 1 is shown "go" (consumed now) and awaits another "go"
	if len(st.Signals) != 1 || st.Signals[0].Name != "go" {
		t.Fatalf("step 1 was shown %+v", st.Signals)
	}
	te.apply(t, st, await("go"))
	if j := te.job(t, id); j.Status != "awaiting" {
		t.Fatalf("a signal consumed by an earlier step woke the await: %s", j.Status)
	}
}

// A spawn into a queue that nothing has created yet creates it, so the dispatcher's
// feeders (which start for queues rows) run the children.
func TestSpawnIntoANewQueueCreatesTheQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	id := te.insert(t, engine.NewJob{})
	st := te.claim(t)
	o, err := engine.DecodeResponse([]byte(`{"spawn": {"children": [{"handler": "h", "queue": "brand-new"}, {"handler": "h"}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	te.apply(t, st, o)
	queues, err := te.db.QueueList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, q := range queues {
		names = append(names, q.Name)
	}
	if !slices.Contains(names, "brand-new") {
		t.Fatalf("queues after the spawn: %v", names)
	}
	steps, _, err := te.Claim(ctx, "brand-new", 10)
	if err != nil || len(steps) != 1 {
		t.Fatalf("claim of the new queue: %d steps, %v", len(steps), err)
	}
	if child := te.job(t, steps[0].ID); child.ParentID == nil || *child.ParentID != id {
		t.Fatalf("the claimed child's parent: %v", child.ParentID)
	}
}

// A claim whose follow-up read fails gives its steps back unrun: runnable, the attempt
// undone, no lease; the next claim shows them everything.
func TestClaimGivesStepsBackWhenLoadingTheirInboxFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	maxAttempts := 1 // the last attempt: a dropped claim would fail it at lease expiry
	id := te.insert(t, engine.NewJob{MaxAttempts: &maxAttempts})
	te.signal(t, id, "approved")
	if _, err := te.db.Exec(ctx, `ALTER TABLE signals RENAME TO signals_away`); err != nil {
		t.Fatal(err)
	}
	steps, _, err := te.Claim(ctx, "default", 10)
	if err == nil || len(steps) != 0 {
		t.Fatalf("claim with an unreadable inbox: %d steps, err %v", len(steps), err)
	}
	j := te.job(t, id)
	if j.Status != "runnable" || j.Attempt != 0 || j.LeaseExpiresAt != nil {
		t.Fatalf("after the failed claim: status %s attempt %d lease %v", j.Status, j.Attempt, j.LeaseExpiresAt)
	}
	if _, err := te.db.Exec(ctx, `ALTER TABLE signals_away RENAME TO signals`); err != nil {
		t.Fatal(err)
	}
	st := te.claim(t)
	if st.Attempt != 1 || len(st.Signals) != 1 || st.Signals[0].Name != "approved" {
		t.Fatalf("the claim after: attempt %d signals %+v", st.Attempt, st.Signals)
	}
}

// The reaper judges expiry by its clock: with the clock set ahead it takes a lease back
// at once (no waiting), runnable while attempts remain and failed on the last one, and
// wakes an await whose deadline passed.
func TestReaperTakesBackExpiredLeasesByItsClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{LeaseTTL: time.Hour})
	one, three := 1, 3
	last := te.insert(t, engine.NewJob{MaxAttempts: &one})
	again := te.insert(t, engine.NewJob{MaxAttempts: &three})
	steps, _, err := te.Claim(ctx, "default", 10)
	if err != nil || len(steps) != 2 {
		t.Fatalf("claim: %d, %v", len(steps), err)
	}
	now := te.NewReaper(engine.ReaperConfig{})
	if st, err := now.Sweep(ctx); err != nil || st.Reaped != 0 {
		t.Fatalf("sweep at the real time took back %d leases (%v); they have an hour left", st.Reaped, err)
	}
	twoHoursAhead := func() time.Time { return time.Now().Add(2 * time.Hour) }
	ahead := te.NewReaper(engine.ReaperConfig{Now: twoHoursAhead})
	st, err := ahead.Sweep(ctx)
	if err != nil || st.Reaped != 2 {
		t.Fatalf("sweep two hours ahead: %+v, %v", st, err)
	}
	if j := te.job(t, last); j.Status != "failed" || j.FinishedAt == nil {
		t.Fatalf("last attempt: %s", j.Status)
	}
	if j := te.job(t, again); j.Status != "runnable" || j.Attempt != 1 || j.LeaseExpiresAt != nil {
		t.Fatalf("attempts left: %s attempt %d", j.Status, j.Attempt)
	}
	// A stale outcome after the reaper took the lease back changes nothing.
	for _, s := range steps {
		_, err := te.ApplyOutcome(ctx, engine.StepOutcome{JobID: s.ID, Token: s.LeaseToken,
			Outcome: engine.Outcome{Kind: pg.KindDone, Label: "done"}})
		if err != engine.ErrLeaseLost {
			t.Fatalf("outcome after reaping: %v", err)
		}
	}
	// An await with a deadline of an hour: asleep now, woken by a clock two hours ahead.
	te = newTestEngine(t, engine.Config{LeaseTTL: time.Hour})
	again = te.insert(t, engine.NewJob{})
	now, ahead = te.NewReaper(engine.ReaperConfig{}), te.NewReaper(engine.ReaperConfig{Now: twoHoursAhead})
	st2 := te.claim(t)
	hour := time.Hour
	te.apply(t, st2, engine.Outcome{Kind: pg.KindAwait, Label: "await", Timeout: &hour})
	if st, _ := now.Sweep(ctx); st.AwaitsWoken != 0 {
		t.Fatalf("woke %d awaits before their deadline", st.AwaitsWoken)
	}
	if st, _ := ahead.Sweep(ctx); st.AwaitsWoken != 1 {
		t.Fatalf("woke %d awaits past their deadline", st.AwaitsWoken)
	}
	if j := te.job(t, again); j.Status != "runnable" || wakeOf(j) != "timeout" {
		t.Fatalf("after the deadline: %s wake %q", j.Status, wakeOf(j))
	}
}

// Retry of a job cancelled while parked resumes the wait; of one cancelled while runnable
// (or failed) runs the current step again.
func TestRetryOfACancelledJobResumesWhatItWasDoing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("awaiting a signal", func(t *testing.T) {
		t.Parallel()
		te := newTestEngine(t, engine.Config{})
		id := te.insert(t, engine.NewJob{})
		hour := time.Hour
		te.apply(t, te.claim(t), engine.Outcome{Kind: pg.KindAwait, Label: "await", Awaiting: []string{"go"}, Timeout: &hour})
		deadline := te.job(t, id).EligibleAt
		if err := te.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := te.Retry(ctx, id); err != nil {
			t.Fatal(err)
		}
		j := te.job(t, id)
		if j.Status != "awaiting" || !slices.Equal(j.Awaiting, []string{"go"}) || j.Step != 1 ||
			j.EligibleAt == nil || !j.EligibleAt.Equal(*deadline) || j.Error != nil {
			t.Fatalf("after retry: %s awaiting %v step %d deadline %v (was %v) error %s",
				j.Status, j.Awaiting, j.Step, j.EligibleAt, deadline, j.Error)
		}
		if s := te.signal(t, id, "noise"); s.Woke {
			t.Fatal("a signal it does not wait for woke the resumed await")
		}
		if s := te.signal(t, id, "go"); !s.Woke {
			t.Fatal("the named signal did not wake the resumed await")
		}
		st := te.claim(t)
		if st.Wake == nil || *st.Wake != "signal" || st.Step != 1 {
			t.Fatalf("the step after the resumed await: wake %v step %d", st.Wake, st.Step)
		}
	})
	t.Run("awaiting children", func(t *testing.T) {
		t.Parallel()
		te := newTestEngine(t, engine.Config{})
		id := te.insert(t, engine.NewJob{})
		o, _ := engine.DecodeResponse([]byte(`{"spawn": {"children": [{"handler": "h"}, {"handler": "h"}]}}`))
		te.apply(t, te.claim(t), o)
		if err := te.Cancel(ctx, id); err != nil { // cancels the two runnable children too
			t.Fatal(err)
		}
		if err := te.Retry(ctx, id); err != nil {
			t.Fatal(err)
		}
		j := te.job(t, id)
		if j.Status != "runnable" || wakeOf(j) != "children" || j.PendingChildren != 0 {
			t.Fatalf("after retry: %s wake %q pending %d", j.Status, wakeOf(j), j.PendingChildren)
		}
		st := te.claim(t)
		if len(st.Children) != 2 || st.Children[0].Status != "cancelled" {
			t.Fatalf("the join after retry was shown %+v", st.Children)
		}
	})
	t.Run("runnable", func(t *testing.T) {
		t.Parallel()
		te := newTestEngine(t, engine.Config{})
		id := te.insert(t, engine.NewJob{})
		if err := te.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := te.Retry(ctx, id); err != nil {
			t.Fatal(err)
		}
		if j := te.job(t, id); j.Status != "runnable" || j.Step != 0 || wakeOf(j) != "" {
			t.Fatalf("after retry: %s step %d wake %q", j.Status, j.Step, wakeOf(j))
		}
	})
	t.Run("cancelled at its await's outcome", func(t *testing.T) {
		t.Parallel()
		te := newTestEngine(t, engine.Config{})
		id := te.insert(t, engine.NewJob{})
		st := te.claim(t)
		if err := te.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
		te.apply(t, st, await("go")) // the await's outcome ends it as cancelled
		if j := te.job(t, id); j.Status != "cancelled" {
			t.Fatalf("cancelled at its outcome: %s", j.Status)
		}
		if err := te.Retry(ctx, id); err != nil {
			t.Fatal(err)
		}
		if j := te.job(t, id); j.Status != "awaiting" || j.Step != 1 || !slices.Equal(j.Awaiting, []string{"go"}) {
			t.Fatalf("after retry: %s step %d awaiting %v", j.Status, j.Step, j.Awaiting)
		}
	})
	t.Run("cancelled at its await's outcome with the signal in", func(t *testing.T) {
		t.Parallel()
		te := newTestEngine(t, engine.Config{})
		id := te.insert(t, engine.NewJob{})
		st := te.claim(t)
		if err := te.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
		te.signal(t, id, "go") // arrives during the step that is being cancelled
		te.apply(t, st, await("go"))
		if err := te.Retry(ctx, id); err != nil {
			t.Fatal(err)
		}
		if j := te.job(t, id); j.Status != "runnable" || wakeOf(j) != "signal" || j.Step != 1 {
			t.Fatalf("after retry: %s wake %q step %d", j.Status, wakeOf(j), j.Step)
		}
		if st := te.claim(t); len(st.Signals) != 1 || st.Signals[0].Name != "go" {
			t.Fatalf("the resumed step was shown %+v", st.Signals)
		}
	})
	t.Run("cancelled at its spawn's outcome", func(t *testing.T) {
		t.Parallel()
		te := newTestEngine(t, engine.Config{})
		id := te.insert(t, engine.NewJob{})
		st := te.claim(t)
		if err := te.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
		o, _ := engine.DecodeResponse([]byte(`{"spawn": {"children": [{"handler": "h"}], "state": {"spawned": true}}}`))
		te.apply(t, st, o)
		j := te.job(t, id)
		if j.Status != "cancelled" || j.Step != 0 || j.ChildrenTotal != 0 {
			t.Fatalf("a spawn ended by a cancel: %s step %d children %d", j.Status, j.Step, j.ChildrenTotal)
		}
		if err := te.Retry(ctx, id); err != nil {
			t.Fatal(err)
		}
		if j := te.job(t, id); j.Status != "runnable" || j.Step != 0 || j.PendingChildren != 0 {
			t.Fatalf("after retry: %s step %d pending %d (the spawning step runs again)", j.Status, j.Step, j.PendingChildren)
		}
	})
}

// A batch holding a stale outcome of a job beside its current one (a process whose lease
// was taken back answering late) applies only the current one: one history row for the
// attempt, no children of the stale spawn, and only the current one reported applied.
// (Found by the chaos run: the history and children joined the batch by job id alone.)
func TestStaleOutcomeInTheSameBatchChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{LeaseTTL: time.Hour})
	id := te.insert(t, engine.NewJob{})
	stale := te.claim(t)
	ahead := te.NewReaper(engine.ReaperConfig{Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
	if st, err := ahead.Sweep(ctx); err != nil || st.Reaped != 1 {
		t.Fatalf("sweep: %+v %v", st, err)
	}
	if _, err := te.db.Exec(ctx, `UPDATE jobs SET eligible_at = now() WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	current := te.claim(t)
	spawn, err := engine.DecodeResponse([]byte(`{"spawn": {"children": [{"handler": "h"}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	results := te.ApplyOutcomes(ctx, []engine.StepOutcome{
		{JobID: id, Token: stale.LeaseToken, Outcome: spawn},
		{JobID: id, Token: current.LeaseToken, Outcome: engine.Outcome{Kind: pg.KindNext, Label: "next"}},
	})
	if results[0].Err != nil || results[1].Err != nil {
		t.Fatal(results[0].Err, results[1].Err)
	}
	if results[0].Applied || !results[1].Applied || results[1].Token != current.LeaseToken {
		t.Fatalf("results %+v, want only the current outcome applied", results)
	}
	j := te.job(t, id)
	if j.Status != "runnable" || j.Step != 1 || j.ChildrenTotal != 0 || j.PendingChildren != 0 {
		t.Fatalf("after the batch: %s step %d children %d pending %d", j.Status, j.Step, j.ChildrenTotal, j.PendingChildren)
	}
	rows, err := te.db.QueryStrings(ctx, `SELECT step || '/' || attempt || '/' || outcome FROM steps WHERE job_id = $1 ORDER BY id`, id)
	if err != nil {
		t.Fatal(err)
	}
	var history []string
	for _, r := range rows {
		history = append(history, r[0])
	}
	if !slices.Equal(history, []string{"0/1/lease_expired", "0/2/next"}) {
		t.Fatalf("history %v", history)
	}
}

// A heartbeat skips a row another transaction has locked instead of waiting for it: the
// other leases are extended at once and the locked one is still reported held (one
// locked row used to stall the whole process's heartbeat until every lease expired).
func TestHeartbeatSkipsALockedRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{LeaseTTL: time.Hour})
	te.insert(t, engine.NewJob{})
	te.insert(t, engine.NewJob{})
	steps, _, err := te.Claim(ctx, "default", 10)
	if err != nil || len(steps) != 2 {
		t.Fatalf("claim: %d %v", len(steps), err)
	}
	other, err := pgx.Connect(ctx, te.url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	lock, args := `SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE`, []any{steps[0].ID}
	if pgtest.Citus() { // the row is locked where it lives: its placement routes the statement
		lock, args = `SELECT 1 FROM jobs WHERE id = $1 AND placement = $2 FOR UPDATE`, []any{steps[0].ID, steps[0].ID % pg.Placements}
	}
	if _, err := tx.Exec(ctx, lock, args...); err != nil {
		t.Fatal(err)
	}
	hbCtx, cancel := context.WithTimeout(ctx, 30*time.Second) // a wait would last until the rollback
	defer cancel()
	leases := []engine.Lease{{JobID: steps[0].ID, Token: steps[0].LeaseToken}, {JobID: steps[1].ID, Token: steps[1].LeaseToken}}
	got, err := te.ExtendLeases(hbCtx, leases)
	if err != nil {
		t.Fatalf("heartbeat with a locked row: %v", err)
	}
	if len(got) != 2 {
		t.Fatalf("heartbeat answered %+v; both leases are held", got)
	}
	for _, g := range got {
		if g.JobID == steps[0].ID && !g.ExpiresAt.Equal(steps[0].LeaseExpiresAt) {
			t.Fatalf("the locked row's lease moved: %s (was %s)", g.ExpiresAt, steps[0].LeaseExpiresAt)
		}
		if g.JobID == steps[1].ID && !g.ExpiresAt.After(steps[1].LeaseExpiresAt) {
			t.Fatalf("the free row's lease was not extended: %s (was %s)", g.ExpiresAt, steps[1].LeaseExpiresAt)
		}
	}
	// A stale token is not held, locked or not.
	got, err = te.ExtendLeases(hbCtx, []engine.Lease{{JobID: steps[1].ID, Token: steps[0].LeaseToken}})
	if err != nil || len(got) != 0 {
		t.Fatalf("a stale token: %+v %v", got, err)
	}
}

// An answer Postgres cannot store is a bad answer, not a failed batch: DecodeResponse
// refuses it, and one that reaches the statement anyway fails only its own attempt.
func TestAnAnswerTheDatabaseRefusesFailsOnlyItsStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, body := range []string{`{"done": {"result": {"a": "x\u0000"}}}`, `{"next": {"state": {"\u0000": 1}}}`,
		`{"await": {"signals": ["go\u0000"]}}`, `{"fail": {"error": "\ud800"}}`} {
		if _, err := engine.DecodeResponse([]byte(body)); err == nil {
			t.Errorf("DecodeResponse accepted %s", body)
		}
	}
	te := newTestEngine(t, engine.Config{})
	good, bad := te.insert(t, engine.NewJob{}), te.insert(t, engine.NewJob{})
	steps, _, err := te.Claim(ctx, "default", 10)
	if err != nil || len(steps) != 2 {
		t.Fatalf("claim: %d %v", len(steps), err)
	}
	var outcomes []engine.StepOutcome
	for _, st := range steps {
		o := engine.Outcome{Kind: pg.KindDone, Label: "done"}
		if st.ID == bad {
			o.Result = []byte(`{"a": "x\u0000"}`) // as if a decoder had let it through
		}
		outcomes = append(outcomes, engine.StepOutcome{JobID: st.ID, Token: st.LeaseToken, Outcome: o})
	}
	for _, r := range te.ApplyOutcomes(ctx, outcomes) {
		if r.Err != nil || !r.Applied {
			t.Fatalf("result %+v", r)
		}
	}
	if j := te.job(t, good); j.Status != "done" {
		t.Fatalf("the good outcome: %s", j.Status)
	}
	if j := te.job(t, bad); j.Status != "runnable" || j.Attempt != 1 {
		t.Fatalf("the refused outcome: %s attempt %d (want a failed attempt, retried)", j.Status, j.Attempt)
	}
}

// Stop ends a maintenance service promptly even with a backlog: the pass in progress is
// cancelled and no further pass starts (it used to run pass after pass until the backlog
// was drained before Stop could return).
func TestReaperStopDoesNotDrainTheBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{LeaseTTL: time.Hour})
	const n = 200
	jobs := make([]engine.NewJob, n)
	for i := range jobs {
		jobs[i] = engine.NewJob{Handler: "h"}
	}
	if _, err := te.InsertJobs(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	for claimed := 0; claimed < n; {
		steps, _, err := te.Claim(ctx, "default", 100)
		if err != nil {
			t.Fatal(err)
		}
		claimed += len(steps)
	}
	reaper := te.NewReaper(engine.ReaperConfig{Batch: 1, Interval: time.Hour,
		Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
	swept := make(chan struct{}, n)
	reaper.OnSweep = func(engine.ReaperStats, error) { swept <- struct{}{} }
	reaper.Start(ctx)
	<-swept // one full batch: the loop goes straight on to the next
	reaper.Stop()
	left, err := te.db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE status = 'executing'`)
	if err != nil {
		t.Fatal(err)
	}
	if left == 0 {
		t.Fatalf("Stop returned only after the reaper had taken back all %d expired leases", n)
	}
	t.Logf("Stop left %d of %d expired leases to the next start", left, n)
}
