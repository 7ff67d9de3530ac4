package dispatch_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gendurable/gendurable/internal/dispatch"
	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// A running dispatcher says which inserts it claims at once: those of a queue it serves
// that its feeder has room for. Their NOTIFY names the process (and the other processes'
// dispatchers let it pass: engine.TestListenForWorkPassesOverWorkAnotherProcessClaims);
// a larger insert, one into a paused queue, and any insert once the dispatcher stopped
// name no process and wake every dispatcher.
func TestDispatcherClaimsAtOnceWhatItHasRoomFor(t *testing.T) {
	t.Parallel()
	pgtest.SkipOnCitus(t, "it counts plain PostgreSQL's claim statement and reads raw NOTIFY payloads; on Citus they also name shards (TestCitusClaimVisitsWarmShards)")
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	counter := &pg.StatementCounter{}
	eng, err := engine.New(pgtest.Open(t, url, pg.Options{Counter: counter}),
		engine.Config{LeaseTTL: 30 * time.Second, Owner: "process-a"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{db: pgtest.Open(t, url, pg.Options{}), eng: eng}
	h.handler(t, "h", doneReceiver(t).URL, 3)
	maxInFlight, batch, paused := 100, 50, true
	for queue, s := range map[string]engine.QueueSettings{"q": {MaxInFlight: &maxInFlight, Batch: &batch},
		"paused": {Paused: &paused}} {
		if _, err := eng.SetQueue(ctx, queue, s); err != nil {
			t.Fatal(err)
		}
	}
	listener, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(ctx)
	if _, err := listener.Exec(ctx, "LISTEN "+pg.JobsChannel); err != nil {
		t.Fatal(err)
	}
	d := startDispatcher(t, eng, dispatch.Config{})
	dispatch.WaitUntil(t, 30*time.Second, "the feeder's first claim", func() bool { return counter.Count("JobClaimPlain") > 0 })

	jobs := func(queue string, n int) []engine.NewJob {
		out := make([]engine.NewJob, n)
		for i := range out {
			out[i] = engine.NewJob{Handler: "h", Queue: queue}
		}
		return out
	}
	notice := func(queue string, n int) string {
		t.Helper()
		if _, err := eng.InsertJobs(ctx, jobs(queue, n)); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		got, err := listener.WaitForNotification(wctx)
		if err != nil {
			t.Fatal(err)
		}
		return got.Payload
	}
	for _, c := range []struct {
		queue string
		n     int
		want  string
	}{
		{"q", 20, "q process-a"}, // 100 free slots, more than the claim threshold (25)
		{"q", 101, "q"},          // more than the free slots
		{"paused", 1, "paused"},
		{"unserved", 1, "unserved"}, // no feeder yet (made by the notice it wakes)
	} {
		if got := notice(c.queue, c.n); got != c.want {
			t.Errorf("%d jobs into %s: notice %q, want %q", c.n, c.queue, got, c.want)
		}
	}
	d.Stop(ctx)
	if got := notice("q", 1); got != "q" {
		t.Errorf("after the dispatcher stopped: notice %q, want %q", got, "q")
	}
}

// The claims that jobs arriving through three processes cost, counted (a gate on
// deterministic counters, as the bench's -pace mode measures them): each insert call of
// 20 jobs, through the processes in turn, costs one claim in all, by the process it went
// through. Every dispatcher used to wake for every insert and claim at once (three claims
// a call, two of them empty or skipping the rows the first held), and each batch of
// finished steps woke its feeder for one more empty claim. The feeders poll once an hour,
// so every claim here is a wake-up's; each process's first claims (at its start and at
// its LISTEN's connect) are left out, with one claim of slack each for a connect that
// lands after them.
func TestSteadyInsertsCostOneClaimEachAcrossProcesses(t *testing.T) {
	t.Parallel()
	pgtest.SkipOnCitus(t, "it counts plain PostgreSQL's claim statement; on Citus a claim is a statement per shard visited (TestCitusClaimVisitsWarmShards)")
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	type process struct {
		eng     *engine.Engine
		counter *pg.StatementCounter
	}
	claims := func(p process) int { return p.counter.Count("JobClaimPlain") + p.counter.Count("JobClaimBatch") }
	var procs []process
	for _, owner := range []string{"process-a", "process-b", "process-c"} {
		counter := &pg.StatementCounter{}
		eng, err := engine.New(pgtest.Open(t, url, pg.Options{Counter: counter, MaxConns: 10}),
			engine.Config{LeaseTTL: 30 * time.Second, Owner: owner}, nil)
		if err != nil {
			t.Fatal(err)
		}
		procs = append(procs, process{eng: eng, counter: counter})
	}
	h := &harness{db: pgtest.Open(t, url, pg.Options{}), eng: procs[0].eng}
	h.handler(t, "h", doneReceiver(t).URL, 3)
	maxInFlight, batch := 100, 50
	if _, err := procs[0].eng.SetQueue(ctx, "q", engine.QueueSettings{MaxInFlight: &maxInFlight, Batch: &batch}); err != nil {
		t.Fatal(err)
	}
	cfg := dispatch.Config{PollMin: time.Hour, PollMax: time.Hour, QueueRefresh: 20 * time.Millisecond}
	for _, p := range procs {
		startDispatcher(t, p.eng, cfg)
		dispatch.WaitUntil(t, 30*time.Second, "a feeder's first claim", func() bool { return claims(p) > 0 })
	}
	total := func() (n int) {
		for _, p := range procs {
			n += claims(p)
		}
		return n
	}
	before := total()
	const calls = 30
	for k := range calls {
		jobs := make([]engine.NewJob, 20)
		for i := range jobs {
			jobs[i] = engine.NewJob{Handler: "h", Queue: "q"}
		}
		out, err := procs[k%len(procs)].eng.InsertJobs(ctx, jobs)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range out {
			waitJob(t, h.db, j.ID, 30*time.Second, hasStatus("done"))
		}
	}
	if got := total() - before; got < calls || got > calls+len(procs) {
		t.Errorf("%d insert calls of 20 jobs through %d processes cost %d claims, want %d (+%d for late connects)",
			calls, len(procs), got, calls, len(procs))
	}
}
