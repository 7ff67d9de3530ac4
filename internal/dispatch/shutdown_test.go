package dispatch_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gendurable/gendurable/internal/dispatch"
	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
	"github.com/gendurable/gendurable/webhook"
)

// A step whose lease is lost while its webhook runs is abandoned: the heartbeat notices,
// the request's context is cancelled, and no outcome is written by the old attempt.
func TestLostLeaseCancelsTheWebhookCall(t *testing.T) {
	t.Parallel()
	pgtest.SkipOnCitus(t, "the test takes the lease with its own SQL (gen_random_uuid in an UPDATE, which Citus refuses)")
	ctx := context.Background()
	h := newHarness(t, 600*time.Millisecond)
	entered := make(chan struct{}, 1)
	cancelled := make(chan struct{}, 1)
	rcv := newReceiver(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		entered <- struct{}{}
		select {
		case <-time.After(20 * time.Second):
		case <-reqContext(w).Done():
		}
		cancelled <- struct{}{}
	})
	h.handler(t, "slow", rcv.URL, 5)
	job := h.insert(t, engine.NewJob{Handler: "slow"})[0]
	startDispatcher(t, h.eng, dispatch.Config{})
	<-entered
	// Another process took the step over (as after a reap and a re-claim).
	if _, err := h.db.Exec(ctx, `UPDATE jobs SET lease_token = gen_random_uuid() WHERE id = $1`, job.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the webhook call was not cancelled after its lease was lost")
	}
	j, _ := h.db.JobGet(ctx, job.ID)
	if j.Status != "executing" {
		t.Fatalf("the abandoned attempt changed the job: %s", j.Status)
	}
	if n, _ := h.db.QueryInt(ctx, `SELECT count(*) FROM steps`); n != 0 {
		t.Fatalf("the abandoned attempt wrote %d history rows", n)
	}
}

// Stop lets a running step finish and write its outcome within the grace period.
func TestStopLetsRunningStepsFinish(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 30*time.Second)
	entered := make(chan struct{}, 1)
	rcv := newReceiver(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		entered <- struct{}{}
		time.Sleep(300 * time.Millisecond)
		answer(w, webhook.Response{Done: &webhook.Done{}})
	})
	h.handler(t, "h", rcv.URL, 3)
	job := h.insert(t, engine.NewJob{Handler: "h"})[0]
	d := startDispatcher(t, h.eng, dispatch.Config{ShutdownGrace: 10 * time.Second})
	<-entered
	d.Stop(context.Background())
	j, _ := h.db.JobGet(context.Background(), job.ID)
	if j.Status != "done" {
		t.Fatalf("after a graceful stop the running step is %s, want done", j.Status)
	}
}

// Past the grace period a running step is abandoned, not failed: it stays leased and the
// reaper runs it again once the lease expires.
func TestStopPastGraceLeavesTheStepToLeaseExpiry(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 30*time.Second)
	entered := make(chan struct{}, 1)
	rcv := newReceiver(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		entered <- struct{}{}
		select {
		case <-time.After(20 * time.Second):
		case <-reqContext(w).Done():
		}
	})
	h.handler(t, "h", rcv.URL, 3)
	job := h.insert(t, engine.NewJob{Handler: "h"})[0]
	d := startDispatcher(t, h.eng, dispatch.Config{ShutdownGrace: 200 * time.Millisecond})
	<-entered
	started := time.Now()
	d.Stop(context.Background())
	if took := time.Since(started); took > 5*time.Second {
		t.Fatalf("Stop took %s with a 200ms grace", took)
	}
	j, _ := h.db.JobGet(context.Background(), job.ID)
	if j.Status != "executing" || j.Attempt != 1 {
		t.Fatalf("abandoned step: status=%s attempt=%d, want executing (left to lease expiry)", j.Status, j.Attempt)
	}
}

// A stopped dispatcher leaves no webhook connection open: the kept-alive ones are closed
// once its last call is over.
func TestStopClosesTheWebhookConnections(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 30*time.Second)
	var open atomic.Int64
	srv := httptest.NewUnstartedServer(webhook.Handler(testSecret, func(context.Context, *webhook.StepRequest) webhook.Response {
		return webhook.Response{Done: &webhook.Done{}}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	h.handler(t, "kept", srv.URL+"/steps", 5)
	jobs := h.insert(t, engine.NewJob{Handler: "kept"}, engine.NewJob{Handler: "kept"}, engine.NewJob{Handler: "kept"})
	d := dispatch.New(h.eng, dispatch.Config{PollMin: 10 * time.Millisecond, PollMax: 100 * time.Millisecond,
		QueueRefresh: 100 * time.Millisecond}, nil, nil)
	d.Start(context.Background())
	for _, j := range jobs {
		waitJob(t, h.db, j.ID, 20*time.Second, hasStatus("done"))
	}
	if open.Load() == 0 {
		t.Fatal("no webhook connection was kept alive before Stop")
	}
	d.Stop(context.Background())
	for deadline := time.Now().Add(10 * time.Second); open.Load() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d webhook connections still open after Stop", open.Load())
		}
	}
}

// Stop returns by its context with PostgreSQL unreachable: the outcome it cannot write is
// given up when the context ends, and the step is left to its lease, which the reaper
// takes back as usual. (The completer drained with context.Background(): up to 5 tries
// of 30 s each, well past the caller's deadline.)
func TestStopReturnsByItsContextWithPostgresUnreachable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	hole, throughHole := newBlackhole(t, url)
	direct := pgtest.Open(t, url, pg.Options{})
	// On Citus the hole stands in front of the coordinator only: the statements of a shard
	// go through it too (routed to its worker, they would go around it).
	db := pgtest.Open(t, throughHole, pg.Options{MaxConns: 8, CitusRoute: pg.CitusRouteCoordinator})
	t.Cleanup(hole.close) // before the pool's
	eng, err := engine.New(db, engine.Config{LeaseTTL: 30 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{db: db, eng: eng}
	entered, release := make(chan struct{}, 1), make(chan struct{})
	rcv := newReceiver(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		entered <- struct{}{}
		<-release
		answer(w, webhook.Response{Done: &webhook.Done{}})
	})
	h.handler(t, "h", rcv.URL, 3)
	job := h.insert(t, engine.NewJob{Handler: "h"})[0]
	d := dispatch.New(eng, dispatch.Config{ShutdownGrace: 10 * time.Second, PollMin: 10 * time.Millisecond,
		PollMax: 100 * time.Millisecond, QueueRefresh: 100 * time.Millisecond}, nil, nil)
	d.Start(ctx)
	<-entered
	hole.cut.Store(true)
	close(release) // the step ends; its outcome cannot be written
	const deadline = 2 * time.Second
	stopCtx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	started := time.Now()
	stopped := make(chan struct{})
	go func() { d.Stop(stopCtx); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatalf("Stop has not returned 30s after it was called with a %s deadline", deadline)
	}
	took := time.Since(started)
	t.Logf("Stop took %s with a %s deadline", took.Round(time.Millisecond), deadline)
	if took > deadline+3*time.Second {
		t.Fatalf("Stop took %s with a %s deadline", took, deadline)
	}
	j, err := direct.JobGet(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.Status != "executing" || j.Attempt != 1 {
		t.Fatalf("after Stop: %s attempt %d, want executing (left to its lease)", j.Status, j.Attempt)
	}
	other, err := engine.New(direct, engine.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ahead := other.NewReaper(engine.ReaperConfig{Now: func() time.Time { return time.Now().Add(time.Hour) }})
	if st, err := ahead.Sweep(ctx); err != nil || st.Reaped != 1 {
		t.Fatalf("the reaper after the lease: %+v %v", st, err)
	}
	waitJob(t, direct, job.ID, 10*time.Second, hasStatus("runnable"))
}

// While Stop waits for the last outcome to be written, the heartbeats go on extending its
// lease, until the outcome is written. (They stopped with the last running step, before
// its outcome was written.)
func TestStopHeartbeatsUntilTheLastOutcomeIsWritten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, 600*time.Millisecond) // a heartbeat every 200ms
	entered, release := make(chan struct{}, 1), make(chan struct{})
	rcv := newReceiver(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		entered <- struct{}{}
		<-release
		answer(w, webhook.Response{Done: &webhook.Done{}})
	})
	h.handler(t, "h", rcv.URL, 3)
	job := h.insert(t, engine.NewJob{Handler: "h"})[0]
	d := startDispatcher(t, h.eng, dispatch.Config{ShutdownGrace: 10 * time.Second})
	<-entered
	// The history is locked: the outcome statement waits (the heartbeat, which writes jobs
	// only, does not).
	locker, err := pgx.Connect(ctx, h.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close(ctx)
	tx, err := locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, `LOCK TABLE steps IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	close(release)
	activity := "pg_stat_activity"
	if pgtest.Citus() {
		activity = "citus_stat_activity" // every node's: the outcome waits on its shard's worker
	}
	waitUntilQuery(t, h.db, `SELECT count(*) > 0 FROM `+activity+` WHERE wait_event_type = 'Lock' AND datname = current_database()`,
		"the outcome statement to wait for the history's lock")
	stopped := make(chan struct{})
	go func() { d.Stop(ctx); close(stopped) }()
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		dispatch.WaitUntil(t, 10*time.Second, what, cond)
	}
	first := leaseExpiry(t, h, job.ID)
	waitUntil("the lease to be extended while its outcome waits", func() bool {
		return leaseExpiry(t, h, job.ID).After(first.Add(400 * time.Millisecond))
	})
	select {
	case <-stopped:
		t.Fatal("Stop returned before the outcome was written")
	default:
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("Stop did not return once the outcome could be written")
	}
	if j, _ := h.db.JobGet(ctx, job.ID); j.Status != "done" {
		t.Fatalf("after Stop: %s, want done", j.Status)
	}
}

func leaseExpiry(t *testing.T, h *harness, id int64) time.Time {
	t.Helper()
	j, err := h.db.JobGet(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if j.LeaseExpiresAt == nil {
		t.Fatalf("job %d holds no lease (%s)", id, j.Status)
	}
	return *j.LeaseExpiresAt
}

// waitUntilQuery polls a query answering one boolean until it answers true.
func waitUntilQuery(t *testing.T, db *pg.DB, query, what string) {
	t.Helper()
	dispatch.WaitUntil(t, 30*time.Second, what, func() bool {
		rows, err := db.QueryStrings(context.Background(), query)
		if err != nil {
			t.Fatal(err)
		}
		return len(rows) == 1 && rows[0][0] == "true"
	})
}
