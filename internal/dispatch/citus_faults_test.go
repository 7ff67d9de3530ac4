package dispatch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/dispatch"
	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/httpapi"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
	"github.com/gendurable/gendurable/webhook"
)

// The faults and growth of a distributed cluster (docs/citus.md, "Faults and growth"):
// each test drains jobs on a Citus cluster of its own (pgtest.NewOwnCitus: what it stops,
// restarts or grows is no other test's) with two dispatchers, as two server processes,
// and a reaper, breaks the cluster in the middle of the drain, and checks that the drain
// goes on, that every job finishes, and the promises of at-least-once delivery with
// fenced outcomes:
//
//   - at most one applied outcome per (job, step): the outcome statement names the lease
//     token it expects, so an outcome that comes back after its lease was taken back
//     (or whose write was reported failed after it committed) changes nothing;
//   - every webhook delivery is a claim, and each claim is one history row: the applied
//     outcome of its step, or the reaper's lease_expired when its lease ran out first.
//     A step is delivered again only after such a lease_expired; nothing is delivered
//     after its step's outcome was applied;
//   - each job's result is the chain of its steps' answers (the state each step was
//     given is the previous applied one's).

// faultSteps is the number of steps of each job of a fault drain: next, next, done.
const faultSteps = 3

// faultDrain is a drain of faultSteps-step jobs on a test's own Citus cluster.
type faultDrain struct {
	own *pgtest.OwnCitus
	// route is where the dispatchers send a shard's statements (the default: its worker).
	route pg.CitusRoute
	db    *pg.DB         // the test's own pool: inserts, settings and what it watches
	eng   *engine.Engine // on db: inserts
	rcv   *receiver
	log   *logTally
	mu    sync.Mutex
	ids   []int64 // the jobs inserted
	// nodeOf is the port of the worker that holds each placement's shard, read at the start.
	nodeOf [pg.Placements]int
	// hold is the webhook's gate: the steps of the jobs that on accepts wait in it until
	// release closes (holdSteps, releaseSteps).
	hold struct {
		sync.Mutex
		on      func(job int64) bool
		held    []webhook.Job
		release chan struct{}
	}
}

// holdSteps makes the webhook hold the steps of the jobs that on accepts until
// releaseSteps: steps in flight, for as long as the test needs them.
func (d *faultDrain) holdSteps(on func(job int64) bool) {
	d.hold.Lock()
	defer d.hold.Unlock()
	d.hold.on, d.hold.release = on, make(chan struct{})
}

// onWorker accepts the jobs whose placement the worker on port holds.
func (d *faultDrain) onWorker(port int) func(int64) bool {
	return func(job int64) bool { return d.nodeOf[job%pg.Placements] == port }
}

// heldSteps are the steps the webhook holds (or held) since holdSteps.
func (d *faultDrain) heldSteps() []webhook.Job {
	d.hold.Lock()
	defer d.hold.Unlock()
	return append([]webhook.Job(nil), d.hold.held...)
}

// releaseSteps lets the held steps answer, and the webhook hold no more.
func (d *faultDrain) releaseSteps() {
	d.hold.Lock()
	defer d.hold.Unlock()
	d.hold.on = nil
	close(d.hold.release)
}

// wait holds the step of job in the webhook if holdSteps asks for it.
func (d *faultDrain) wait(ctx context.Context, job webhook.Job) {
	d.hold.Lock()
	release := d.hold.release
	if d.hold.on != nil && d.hold.on(job.ID) {
		d.hold.held = append(d.hold.held, job)
	} else {
		release = nil
	}
	d.hold.Unlock()
	if release != nil {
		select {
		case <-release:
		case <-ctx.Done():
		}
	}
}

// newFaultDrain makes a Citus cluster for t, registers the handler and inserts jobs
// faultSteps-step jobs, ready to drain. They go in batches of 8: a batch of jobs that no
// key places goes to one shard (the process's next, in turn), and small batches spread
// the jobs over every shard, so over both workers.
func newFaultDrain(t *testing.T, jobs int, opts pgtest.OwnCitusOptions) *faultDrain {
	t.Helper()
	own := pgtest.NewOwnCitus(t, opts)
	d := &faultDrain{own: own, log: &logTally{counts: map[string]int{}}}
	d.db = pgtest.Open(t, own.URL, pg.Options{MaxConns: 4})
	d.rcv = newReceiver(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		d.wait(reqContext(w), req.Job)
		var st struct{ Visits []int }
		_ = json.Unmarshal(req.Job.State, &st)
		st.Visits = append(st.Visits, req.Job.Step)
		b, _ := json.Marshal(st)
		if req.Job.Step < faultSteps-1 {
			answer(w, webhook.Response{Next: &webhook.Next{State: b}})
			return
		}
		answer(w, webhook.Response{Done: &webhook.Done{Result: b}})
	})
	ctx := context.Background()
	// The call timeout is long: the webhook holds steps in flight for seconds (holdSteps).
	maxAttempts, base, timeout := 100, 10, 30000
	if _, err := d.db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: d.rcv.URL, Secret: ptr(testSecret),
		MaxAttempts: &maxAttempts, BackoffBaseMS: &base, TimeoutMS: &timeout}); err != nil {
		t.Fatal(err)
	}
	var err error
	if d.eng, err = engine.New(d.db, engine.Config{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.insert(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	if _, err := d.db.QueueUpsert(ctx, pg.QueueUpsert{Name: "default", MaxInFlight: ptr(64), Batch: ptr(32)}); err != nil {
		t.Fatal(err)
	}
	d.readLayout(t)
	return d
}

// insert inserts n jobs in batches of 8 and adds their ids to d.ids.
func (d *faultDrain) insert(ctx context.Context, n int) error {
	for n > 0 {
		batch := make([]engine.NewJob, min(8, n))
		for i := range batch {
			batch[i] = engine.NewJob{Handler: "h"}
		}
		got, err := d.eng.InsertJobs(ctx, batch)
		if err != nil {
			return err
		}
		d.mu.Lock()
		for _, j := range got {
			d.ids = append(d.ids, j.ID)
		}
		d.mu.Unlock()
		n -= len(batch)
	}
	return nil
}

// jobIDs are the ids of the jobs inserted so far.
func (d *faultDrain) jobIDs() []int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]int64(nil), d.ids...)
}

// readLayout reads which worker holds each placement's shard (nodeOf) from the
// coordinator's metadata, which answers while a worker is down.
func (d *faultDrain) readLayout(t *testing.T) {
	t.Helper()
	rows, err := d.db.QueryStrings(context.Background(), `SELECT v.p, n.nodeport FROM generate_series(0, $1 - 1) AS v(p)
		JOIN pg_dist_placement pl ON pl.shardid = get_shard_id_for_distribution_column('jobs', v.p)
		JOIN pg_dist_node n ON n.groupid = pl.groupid`, pg.Placements)
	if err != nil || len(rows) != pg.Placements {
		t.Fatalf("the placements' workers: %d rows, %v", len(rows), err)
	}
	for _, r := range rows {
		p, _ := strconv.Atoi(r[0])
		d.nodeOf[p], _ = strconv.Atoi(r[1])
	}
}

// start starts the two dispatchers (each its own engine and pool, as two server
// processes) and a reaper, with leases of ttl.
func (d *faultDrain) start(t *testing.T, ttl time.Duration) {
	t.Helper()
	for i := range 2 {
		db := pgtest.Open(t, d.own.URL, pg.Options{MaxConns: 10, CitusRoute: d.route})
		eng, err := engine.New(db, engine.Config{LeaseTTL: ttl, Owner: fmt.Sprintf("dispatcher-%d", i)}, d.log.logger())
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			r := eng.NewReaper(engine.ReaperConfig{Interval: 200 * time.Millisecond})
			r.Start(context.Background())
			t.Cleanup(r.Stop)
		}
		disp := dispatch.New(eng, dispatch.Config{PollMin: 10 * time.Millisecond, PollMax: 100 * time.Millisecond,
			QueueRefresh: 100 * time.Millisecond}, d.log.logger(), nil)
		disp.Start(context.Background())
		t.Cleanup(func() { disp.Stop(context.Background()) })
	}
}

// jobsOn lists the placements whose shard the worker on port holds.
func (d *faultDrain) placementsOn(port int) []int {
	var out []int
	for p, n := range d.nodeOf {
		if n == port {
			out = append(out, p)
		}
	}
	return out
}

// jobsOn counts the drain's jobs whose placement the worker on port holds.
func (d *faultDrain) jobsOn(port int) int {
	n := 0
	for _, id := range d.jobIDs() {
		if d.nodeOf[id%pg.Placements] == port {
			n++
		}
	}
	return n
}

// count runs a count(*) of the drain's jobs or history rows (what, a FROM … WHERE …
// clause) on the placements given (nil: all). A statement that names the placements of
// live workers only is routed to them alone, and answers while another worker is down.
func (d *faultDrain) count(placements []int, what string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int64
	var err error
	if placements == nil {
		n, err = d.db.QueryInt(ctx, `SELECT count(*) FROM `+what)
	} else {
		n, err = d.db.QueryInt(ctx, `SELECT count(*) FROM `+what+` AND placement = ANY($1)`, placements)
	}
	return int(n), err
}

// Counted by count: the jobs done, the outcomes applied (history rows).
const (
	jobsDone        = `jobs WHERE status = 'done'`
	outcomesApplied = `steps WHERE outcome IN ('next', 'done')`
)

// mustCount is count, failing t on an error.
func (d *faultDrain) mustCount(t *testing.T, placements []int, what string) int {
	t.Helper()
	n, err := d.count(placements, what)
	if err != nil {
		t.Fatalf("counting %s: %v", what, err)
	}
	return n
}

// waitCount polls count(placements, what) until it reaches want, or fails t after
// timeout. A count that fails (the coordinator restarting) is tried again.
func (d *faultDrain) waitCount(t *testing.T, placements []int, what string, want int, timeout time.Duration, why string) int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		n, err := d.count(placements, what)
		if err == nil && n >= want {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d %s within %s (last error: %v); logged: %s", why, n, want, what, timeout, err, d.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// faultFigures are what a fault drain counted, for the test's log and docs/citus.md.
type faultFigures struct {
	jobs, deliveries, applied, leaseExpired, undelivered int
}

func (f faultFigures) String() string {
	return fmt.Sprintf("%d jobs, %d webhook deliveries, %d applied outcomes, %d lease_expired rows (%d of claims never delivered)",
		f.jobs, f.deliveries, f.applied, f.leaseExpired, f.undelivered)
}

// check waits for every job to be done, then checks the drain's promises (see the top of
// this file) on the history and the webhook's record.
func (d *faultDrain) check(t *testing.T, timeout time.Duration) faultFigures {
	t.Helper()
	ctx := context.Background()
	ids := d.jobIDs()
	total := len(ids) * faultSteps
	d.waitCount(t, nil, jobsDone, len(ids), timeout, "every job done")
	f := faultFigures{jobs: len(ids)}
	// Nothing lost: every inserted job is done, with the chain of its steps' answers.
	rows, err := d.db.QueryStrings(ctx, `SELECT id, status, result::text FROM jobs`)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`{"Visits":[%s]}`, visits(faultSteps))
	found := map[int64]bool{}
	for _, r := range rows {
		id, _ := strconv.ParseInt(r[0], 10, 64)
		found[id] = true
		if r[1] != "done" || !jsonEqual(json.RawMessage(r[2]), want) {
			t.Errorf("job %d: %s with result %s, want done with %s", id, r[1], r[2], want)
		}
	}
	for _, id := range ids {
		if !found[id] {
			t.Errorf("job %d is lost", id)
		}
	}
	// The history: one row per claim, one applied outcome per (job, step).
	type claim struct {
		job           int64
		step, attempt int
	}
	history := map[claim]string{}
	appliedAt := map[claim]int{} // (job, step) → the attempt whose outcome applied
	rows, err = d.db.QueryStrings(ctx, `SELECT job_id, step, attempt, outcome FROM steps`)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		id, _ := strconv.ParseInt(r[0], 10, 64)
		step, _ := strconv.Atoi(r[1])
		attempt, _ := strconv.Atoi(r[2])
		c := claim{id, step, attempt}
		if prev, ok := history[c]; ok {
			t.Errorf("job %d step %d attempt %d: two history rows (%s, %s)", id, step, attempt, prev, r[3])
		}
		history[c] = r[3]
		switch r[3] {
		case "next", "done":
			f.applied++
			k := claim{id, step, 0}
			if a, ok := appliedAt[k]; ok {
				t.Errorf("job %d step %d: applied twice (attempts %d and %d)", id, step, a, attempt)
			}
			appliedAt[k] = attempt
		case "lease_expired":
			f.leaseExpired++
		default:
			t.Errorf("job %d step %d attempt %d: outcome %s, want next, done or lease_expired", id, step, attempt, r[3])
		}
	}
	if f.applied != total {
		t.Errorf("%d applied outcomes, want %d (%d jobs × %d steps)", f.applied, total, len(ids), faultSteps)
	}
	// The webhook: each delivery is a claim with its history row; a step is delivered
	// again only after a lease_expired, never after its outcome applied.
	delivered := map[claim]int{}
	for _, c := range d.rcv.Calls() {
		f.deliveries++
		k := claim{c.Job.ID, c.Job.Step, c.Job.Attempt}
		delivered[k]++
		if delivered[k] == 2 {
			t.Errorf("job %d step %d attempt %d: delivered twice", k.job, k.step, k.attempt)
		}
		outcome, ok := history[k]
		switch {
		case !ok:
			t.Errorf("job %d step %d attempt %d: delivered, and no history row for that claim", k.job, k.step, k.attempt)
		case outcome == "lease_expired":
		default:
			if a := appliedAt[claim{k.job, k.step, 0}]; a != k.attempt {
				t.Errorf("job %d step %d: attempt %d delivered, attempt %d applied", k.job, k.step, k.attempt, a)
			}
		}
		if a, ok := appliedAt[claim{k.job, k.step, 0}]; ok && k.attempt > a {
			t.Errorf("job %d step %d: attempt %d delivered after attempt %d's outcome applied", k.job, k.step, k.attempt, a)
		}
	}
	for c, outcome := range history {
		if delivered[c] == 0 {
			if outcome != "lease_expired" {
				t.Errorf("job %d step %d attempt %d: outcome %s applied, never delivered", c.job, c.step, c.attempt, outcome)
			}
			f.undelivered++
		}
	}
	return f
}

// visits is "0,1,…,n-1".
func visits(n int) string {
	s := ""
	for i := range n {
		if i > 0 {
			s += ","
		}
		s += strconv.Itoa(i)
	}
	return s
}

// logTally counts the warnings and errors the dispatchers, engines and reaper log, by
// message: what a fault made them say (the test's log names them).
type logTally struct {
	mu     sync.Mutex
	counts map[string]int
	first  map[string]string
	// givenUp are the jobs whose step's outcome the dispatchers gave up writing.
	givenUp map[int64]bool
}

func (l *logTally) logger() *slog.Logger { return slog.New(l) }

func (l *logTally) Enabled(_ context.Context, level slog.Level) bool { return level >= slog.LevelWarn }

func (l *logTally) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counts[r.Message]++
	if l.first == nil {
		l.first, l.givenUp = map[string]string{}, map[int64]bool{}
	}
	if r.Message == outcomeGivenUp {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "job_id" {
				l.givenUp[a.Value.Int64()] = true
			}
			return true
		})
	}
	if _, ok := l.first[r.Message]; !ok {
		var attrs string
		r.Attrs(func(a slog.Attr) bool {
			attrs += " " + a.String()
			return true
		})
		l.first[r.Message] = attrs
	}
	return nil
}

// gaveUp reports whether the dispatchers gave up writing the outcome of a step of job.
func (l *logTally) gaveUp(job int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.givenUp[job]
}

// outcomeGivenUp is what the dispatcher logs when it gives up writing a step's outcome.
const outcomeGivenUp = "writing a step's outcome failed; the step will run again after its lease expires"

func (l *logTally) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logTally) WithGroup(string) slog.Handler      { return l }

// String lists each message with its count and the attributes of its first record.
func (l *logTally) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	msgs := make([]string, 0, len(l.counts))
	for m := range l.counts {
		msgs = append(msgs, m)
	}
	sort.Strings(msgs)
	s := ""
	for _, m := range msgs {
		s += fmt.Sprintf("\n  %d × %q (first:%s)", l.counts[m], m, l.first[m])
	}
	if s == "" {
		return "nothing logged"
	}
	return s
}

// A worker stopped as a crash would (immediate shutdown) in the middle of a drain, with
// steps in flight on both workers: the jobs on the other worker's shards go on to the end
// while it is down, and once it is back every job finishes, nothing lost, no outcome
// applied twice. The steps that were in flight on the stopped worker, whose outcomes could
// not be written, are delivered again after their lease expired: that is the at-least-once
// the design allows, and all it allows. No step of the live worker runs twice: its slow
// steps, held in the webhook past the stop, keep their leases (the heartbeat names every
// lease a process holds, those on the stopped worker too).
func TestCitusWorkerDownDuringADrain(t *testing.T) {
	t.Parallel()
	const jobs = 1200
	const ttl = 8 * time.Second
	ctx := context.Background()
	d := newFaultDrain(t, jobs, pgtest.OwnCitusOptions{})
	const down = 2 // the worker stopped; worker 1 stays up
	live := d.placementsOn(d.own.Port(1))
	liveJobs := d.jobsOn(d.own.Port(1))
	if liveJobs == 0 || liveJobs == jobs {
		t.Fatalf("%d of %d jobs on worker 1: the jobs are not spread over both workers", liveJobs, jobs)
	}
	started := time.Now()
	d.start(t, ttl)
	d.waitCount(t, nil, outcomesApplied, jobs/2, time.Minute, "the drain under way")
	// Steps in flight when the worker stops: up to 24 of its own from now on, and 4 of the
	// live worker's, held in the webhook. (Holding every one of its steps filled both
	// dispatchers' 64 slots now and then before 4 of the live worker's came: a process's
	// claims stay on the shards that last had work.)
	onDown, onLive, slow, downHeld := d.onWorker(d.own.Port(down)), d.onWorker(d.own.Port(1)), 0, 0
	d.holdSteps(func(job int64) bool {
		switch {
		case onLive(job) && slow < 4:
			slow++
			return true
		case onDown(job) && downHeld < 24:
			downHeld++
			return true
		}
		return false
	})
	heldOn := func(on func(int64) bool) (ids []int64) {
		for _, j := range d.heldSteps() {
			if on(j.ID) {
				ids = append(ids, j.ID)
			}
		}
		return ids
	}
	dispatch.WaitUntil(t, 30*time.Second, "steps of both workers in flight", func() bool {
		return len(heldOn(onDown)) >= 8 && len(heldOn(onLive)) == 4
	})
	d.own.StopNodeImmediately(down)
	stopped := time.Now()
	atStop := d.mustCount(t, live, outcomesApplied)
	// The live worker's slow steps are heartbeated: their leases move past their first expiry.
	slowIDs := heldOn(onLive)
	d.waitCount(t, live, fmt.Sprintf(`jobs WHERE id IN (%s) AND lease_expires_at > attempted_at + interval '%d ms'`,
		joinIDs(slowIDs), (ttl+time.Second).Milliseconds()), len(slowIDs), 3*ttl, "the live worker's slow steps heartbeated")
	d.releaseSteps()
	// While it is down, every job on the live worker finishes.
	d.waitCount(t, live, jobsDone, liveJobs, time.Minute, "the live worker's jobs finishing while the other is down")
	duringOutage := d.mustCount(t, live, outcomesApplied) - atStop
	if err := d.own.RestartNode(ctx, down); err != nil {
		t.Fatal(err)
	}
	downFor := time.Since(stopped)
	f := d.check(t, time.Minute)
	// Each step held in flight on the stopped worker ended by lease expiry (its outcome
	// could not be written) and ran again; no step of the live worker did.
	rows, err := d.db.QueryStrings(ctx, `SELECT job_id, step, attempt, placement FROM steps WHERE outcome = 'lease_expired'`)
	if err != nil {
		t.Fatal(err)
	}
	expired := map[[3]int64]bool{}
	for _, r := range rows {
		var k [3]int64
		for i := range k {
			k[i], _ = strconv.ParseInt(r[i], 10, 64)
		}
		expired[k] = true
		if p, _ := strconv.Atoi(r[3]); d.nodeOf[p] != d.own.Port(down) {
			t.Errorf("job %d step %d attempt %d of the live worker: lease expired", k[0], k[1], k[2])
		}
	}
	held := d.heldSteps()
	for _, j := range held {
		if onDown(j.ID) && !expired[[3]int64{j.ID, int64(j.Step), int64(j.Attempt)}] {
			t.Errorf("job %d step %d attempt %d, in flight when its worker stopped: not ended by lease expiry", j.ID, j.Step, j.Attempt)
		}
	}
	t.Logf("worker %d stopped after %.1fs of drain with %d of its steps in flight (and %d slow ones of worker 1), down %.1fs: %d outcomes applied on worker 1 meanwhile (its %d jobs all done); %s; all done %.1fs after the start",
		down, stopped.Sub(started).Seconds(), len(held)-len(slowIDs), len(slowIDs), downFor.Seconds(), duringOutage, liveJobs, f,
		time.Since(started).Seconds())
	t.Logf("logged: %s", d.log)
}

// A worker that stops answering without closing its connections (frozen with SIGSTOP,
// as a hung host or a network partition that sends no reset would be) in the middle of a
// drain: a statement on its shards waits until its deadline (pg.Options.ShardTimeout),
// then its worker's circuit passes its shards over, and the jobs on the other worker's
// shards go on to the end while it stays frozen. Thawed, it is probed again, and every
// job finishes: nothing lost, no outcome applied twice.
func TestCitusWorkerHungDuringADrain(t *testing.T) {
	t.Parallel()
	const jobs = 1200
	d := newFaultDrain(t, jobs, pgtest.OwnCitusOptions{})
	const hung = 2 // the worker frozen; worker 1 stays up
	live := d.placementsOn(d.own.Port(1))
	liveJobs := d.jobsOn(d.own.Port(1))
	if liveJobs == 0 || liveJobs == jobs {
		t.Fatalf("%d of %d jobs on worker 1: the jobs are not spread over both workers", liveJobs, jobs)
	}
	started := time.Now()
	d.start(t, 8*time.Second)
	d.waitCount(t, nil, outcomesApplied, jobs/2, time.Minute, "the drain under way")
	if err := d.own.FreezeNode(hung); err != nil {
		t.Fatal(err)
	}
	frozen, thawed := time.Now(), false
	t.Cleanup(func() { // before the cluster stops (cleanups run last first)
		if !thawed {
			_ = d.own.ThawNode(hung)
		}
	})
	// Counted on the live worker's shards only: a count on every shard would wait too.
	atFreeze := d.mustCount(t, live, outcomesApplied)
	// The API meanwhile: a list (every shard) answers a 503 problem at its deadline, a
	// job on the live worker answers at once.
	api := d.apiServer(t, 3*time.Second)
	var liveJob int64
	for _, id := range d.jobIDs() {
		if d.nodeOf[id%pg.Placements] == d.own.Port(1) {
			liveJob = id
			break
		}
	}
	listWhileHung, listTook := api.get(t, "/v1/jobs?limit=10")
	jobWhileHung, jobTook := api.get(t, fmt.Sprintf("/v1/jobs/%d", liveJob))
	if listWhileHung != http.StatusServiceUnavailable || listTook > 20*time.Second {
		t.Errorf("GET /v1/jobs with a worker hung: %d after %v; want 503 at the 3 s deadline", listWhileHung, listTook)
	}
	if jobWhileHung != http.StatusOK {
		t.Errorf("GET of job %d on the live worker with the other hung: %d after %v; want 200", liveJob, jobWhileHung, jobTook)
	}
	d.waitCount(t, live, jobsDone, liveJobs, 2*time.Minute, "the live worker's jobs finishing while the other is frozen")
	liveDoneAfter := time.Since(frozen)
	duringFreeze := d.mustCount(t, live, outcomesApplied) - atFreeze
	thawed = true
	if err := d.own.ThawNode(hung); err != nil {
		t.Fatal(err)
	}
	frozenFor := time.Since(frozen)
	f := d.check(t, 2*time.Minute)
	if status, took := api.get(t, "/v1/jobs?limit=10"); status != http.StatusOK {
		t.Errorf("GET /v1/jobs after the thaw: %d after %v", status, took)
	}
	t.Logf("API while worker %d was hung: the list answered %d after %.1fs, job %d on the live worker %d after %.3fs",
		hung, listWhileHung, listTook.Seconds(), liveJob, jobWhileHung, jobTook.Seconds())
	t.Logf("worker %d frozen after %.1fs of drain: worker 1's %d jobs all done %.1fs later (%d outcomes applied there meanwhile); thawed after %.1fs; %s; all done %.1fs after the start",
		hung, frozen.Sub(started).Seconds(), liveJobs, liveDoneAfter.Seconds(), duringFreeze, frozenFor.Seconds(), f,
		time.Since(started).Seconds())
	t.Logf("logged: %s", d.log)
}

// faultAPI is the REST API on the drain's engine.
type faultAPI struct{ url string }

// apiServer serves the REST API on the drain's engine, its calls cut at deadline.
func (d *faultDrain) apiServer(t *testing.T, deadline time.Duration) faultAPI {
	t.Helper()
	h, err := httpapi.New(d.eng, httpapi.Config{RequestTimeout: deadline}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return faultAPI{url: srv.URL}
}

// get answers the status of a GET and how long it took.
func (a faultAPI) get(t *testing.T, path string) (int, time.Duration) {
	t.Helper()
	began := time.Now()
	resp, err := http.Get(a.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, time.Since(began)
}

// joinIDs is "1, 2, 3".
func joinIDs(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(s, ", ")
}

// The coordinator stopped as a crash would (immediate shutdown, then crash recovery) in
// the middle of a drain, with steps in flight: every connection of the dispatchers to it,
// their LISTEN and the reaper's dies with it. Then it restarts; the dispatchers reconnect
// and carry on: every job finishes, nothing lost, no outcome applied twice.
//
// Routed to the workers (the default), the step path does not go through the coordinator:
// the outcomes of the steps in flight are written on their workers while it is down, and
// the drain goes on there (claims and outcomes), read from a worker meanwhile.
//
// Routed through the coordinator, the outcomes of the steps in flight cannot be written:
// it stays down until the dispatchers have given them up. Each such step ends by lease
// expiry and is delivered again (at-least-once); a claim whose answer was lost with the
// coordinator was never delivered, and its lease expired too.
func TestCitusCoordinatorRestartDuringADrain(t *testing.T) {
	t.Parallel()
	for _, route := range []pg.CitusRoute{pg.CitusRouteWorkers, pg.CitusRouteCoordinator} {
		t.Run(string(route), func(t *testing.T) { coordinatorRestartDuringADrain(t, route) })
	}
}

func coordinatorRestartDuringADrain(t *testing.T, route pg.CitusRoute) {
	const jobs = 1200
	ctx := context.Background()
	d := newFaultDrain(t, jobs, pgtest.OwnCitusOptions{})
	d.route = route
	// What the test reads while the coordinator is down: a worker plans a statement on
	// every shard as the coordinator would.
	worker := pgtest.Open(t, d.own.Nodes[1].TCPURL(d.own.Database), pg.Options{MaxConns: 2, CitusRoute: pg.CitusRouteCoordinator})
	appliedOnWorkers := func() (int64, error) {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return worker.QueryInt(c, `SELECT count(*) FROM `+outcomesApplied)
	}
	started := time.Now()
	d.start(t, 10*time.Second)
	d.waitCount(t, nil, outcomesApplied, jobs/2, time.Minute, "the drain under way")
	d.holdSteps(func(int64) bool { return true })
	dispatch.WaitUntil(t, 30*time.Second, "steps in flight", func() bool { return len(d.heldSteps()) >= 16 })
	before := d.mustCount(t, nil, outcomesApplied)
	d.own.StopNodeImmediately(0)
	stopped := time.Now()
	d.releaseSteps() // their outcomes meet the coordinator down
	held := d.heldSteps()
	duringDown := ""
	if route == pg.CitusRouteCoordinator {
		dispatch.WaitUntil(t, 30*time.Second, "the outcomes of the steps in flight given up", func() bool {
			for _, j := range held {
				if !d.log.gaveUp(j.ID) {
					return false
				}
			}
			return true
		})
	} else {
		ids := make([]int64, len(held))
		for i, j := range held {
			ids[i] = j.ID
		}
		dispatch.WaitUntil(t, 30*time.Second, "the outcomes of the steps in flight written on their workers, the coordinator down", func() bool {
			rows, err := worker.QueryStrings(ctx, `SELECT job_id, step, attempt FROM steps
				WHERE job_id = ANY($1) AND outcome IN ('next', 'done')`, ids)
			if err != nil {
				return false
			}
			applied := map[[3]string]bool{}
			for _, r := range rows {
				applied[[3]string(r)] = true
			}
			for _, j := range held {
				if !applied[[3]string{strconv.FormatInt(j.ID, 10), strconv.Itoa(j.Step), strconv.Itoa(j.Attempt)}] {
					return false
				}
			}
			return true
		})
		n0, err := appliedOnWorkers()
		if err != nil {
			t.Fatal(err)
		}
		dispatch.WaitUntil(t, 30*time.Second, "the drain to go on with the coordinator down", func() bool {
			n, err := appliedOnWorkers()
			return err == nil && n >= n0+200
		})
		n1, err := appliedOnWorkers()
		if err != nil {
			t.Fatal(err)
		}
		duringDown = fmt.Sprintf("%d outcomes applied on the workers while it was down (%d of them the held steps'); ", n1-int64(before), len(held))
	}
	if err := d.own.RestartNode(ctx, 0); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	downFor := restarted.Sub(stopped)
	// The dispatchers carry on: a few hundred more steps finish (the test's own pool
	// reconnects too; a count on a connection that died with the coordinator is retried).
	now := d.waitCount(t, nil, outcomesApplied, 0, 30*time.Second, "the coordinator back")
	d.waitCount(t, nil, outcomesApplied, min(now+300, jobs*faultSteps), 30*time.Second, "steps finishing after the restart")
	resumed := time.Since(restarted)
	f := d.check(t, time.Minute)
	expired, err := d.db.QueryStrings(ctx, `SELECT job_id, step, attempt FROM steps WHERE outcome = 'lease_expired'`)
	if err != nil {
		t.Fatal(err)
	}
	ended := map[[3]string]bool{}
	for _, r := range expired {
		ended[[3]string(r)] = true
	}
	for _, j := range held {
		byExpiry := ended[[3]string{strconv.FormatInt(j.ID, 10), strconv.Itoa(j.Step), strconv.Itoa(j.Attempt)}]
		switch {
		case route == pg.CitusRouteCoordinator && !byExpiry:
			t.Errorf("job %d step %d attempt %d, whose outcome was given up: not ended by lease expiry", j.ID, j.Step, j.Attempt)
		case route != pg.CitusRouteCoordinator && (byExpiry || d.log.gaveUp(j.ID)):
			t.Errorf("job %d step %d attempt %d: its outcome was written with the coordinator down, yet it ended by lease expiry (%v) or was given up (%v)",
				j.ID, j.Step, j.Attempt, byExpiry, d.log.gaveUp(j.ID))
		}
	}
	t.Logf("route %s: coordinator stopped after %.1fs of drain (%d outcomes applied) with %d steps held in flight, down %.1fs; %s300 more outcomes applied %.1fs after the restart; %s; all done %.1fs after the start",
		route, stopped.Sub(started).Seconds(), before, len(held), downFor.Seconds(), duringDown, resumed.Seconds(), f, time.Since(started).Seconds())
	t.Logf("logged: %s", d.log)
}

// A third worker added in the middle of a drain, and the shards rebalanced onto it online
// (citus_rebalance_start: each shard group copied by logical replication while it is
// written, then switched over in a short write block) while jobs keep coming: steps keep
// finishing during the rebalance, the shards end up spread over the three workers, the
// jobs on the moved shards are claimed and finished there, and every job, also those
// inserted during the moves, finishes: nothing lost, no outcome applied twice, no lease
// expired (the leases are long: nothing here is a fault).
//
// The database has 8 shards (3 moves) instead of 32: a move takes about 6 s here, most of
// it Citus waiting for the subscription in 1 s polls, and the moves onto one worker run
// one after another (32 shards: 10 moves, 60 s idle, 90 s under the drain).
func TestCitusWorkerAddedAndShardsRebalancedDuringADrain(t *testing.T) {
	t.Parallel()
	const jobs = 1200
	ctx := context.Background()
	d := newFaultDrain(t, jobs, pgtest.OwnCitusOptions{ShardCount: 8})
	// The third worker's server is started beforehand (initdb is not what is tested); it
	// joins the cluster (citus_add_node) in the middle of the drain.
	w, err := d.own.StartWorker(ctx, d.own.Database)
	if err != nil {
		t.Fatal(err)
	}
	d.own.SynchronousCommit(t, w)
	for i := range d.own.Nodes {
		node := pgtest.Open(t, d.own.Nodes[i].TCPURL(d.own.Database), pg.Options{MaxConns: 1})
		if rows, err := node.QueryStrings(ctx, `SHOW wal_level`); err != nil || rows[0][0] != "logical" {
			t.Fatalf("node %d: wal_level %v (%v); an online shard move needs logical", i, rows, err)
		}
		node.Close()
	}
	started := time.Now()
	d.start(t, time.Minute)
	d.waitCount(t, nil, outcomesApplied, jobs/2, time.Minute, "the drain under way")
	// Jobs keep coming (4 every 50 ms) until the moved shards have served some.
	produce, produced := make(chan struct{}), make(chan error, 1)
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-produce:
				produced <- nil
				return
			case <-tick.C:
			}
			if err := d.insert(ctx, 4); err != nil {
				produced <- err
				return
			}
		}
	}()
	if err := d.own.AddWorker(ctx, d.own.Database, w); err != nil {
		t.Fatal(err)
	}
	if _, err := d.db.Exec(ctx, `SELECT citus_rebalance_start()`); err != nil {
		t.Fatal(err)
	}
	rebalancing := time.Now()
	atStart := d.mustCount(t, nil, outcomesApplied)
	// Wait for the rebalance to finish, watching the drain: the longest time without a
	// step finishing.
	var state string
	last, lastAt, stall := atStart, time.Now(), time.Duration(0)
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		rows, err := d.db.QueryStrings(ctx, `SELECT state::text FROM citus_rebalance_status()`)
		if err != nil || len(rows) != 1 {
			t.Fatalf("citus_rebalance_status: %v, %v", rows, err)
		}
		state = rows[0][0]
		if n, now := d.mustCount(t, nil, outcomesApplied), time.Now(); n > last {
			stall = max(stall, now.Sub(lastAt))
			last, lastAt = n, now
		}
		if state != "scheduled" && state != "running" || time.Now().After(deadline) {
			break
		}
	}
	rebalanced := time.Since(rebalancing)
	stall = max(stall, time.Since(lastAt))
	duringRebalance := last - atStart
	if state != "finished" {
		t.Fatalf("the rebalance ended %s after %s", state, rebalanced)
	}
	if duringRebalance == 0 || stall > 10*time.Second {
		t.Errorf("%d outcomes applied during the %.1fs of rebalance, at most %.1fs without one: want the drain going on",
			duringRebalance, rebalanced.Seconds(), stall.Seconds())
	}
	shards, err := d.db.QueryStrings(ctx, `SELECT nodeport, count(*) FROM citus_shards WHERE table_name = 'jobs'::regclass GROUP BY 1 ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	if len(shards) != 3 {
		t.Fatalf("the shards of jobs are on %v after the rebalance, want three workers", shards)
	}
	// The new worker's shards serve the drain: steps of their jobs finish there.
	d.readLayout(t)
	moved := d.placementsOn(d.own.Port(w))
	since, err := d.db.QueryStrings(ctx, `SELECT now()::text`)
	if err != nil {
		t.Fatal(err)
	}
	onNew := fmt.Sprintf(`steps WHERE outcome IN ('next', 'done') AND finished_at > '%s'`, since[0][0])
	d.waitCount(t, moved, onNew, 50, 30*time.Second, "steps finishing on the new worker's shards")
	close(produce)
	if err := <-produced; err != nil {
		t.Fatalf("inserting during the rebalance: %v", err)
	}
	f := d.check(t, time.Minute)
	if f.leaseExpired != 0 {
		t.Errorf("%d leases expired during a rebalance", f.leaseExpired)
	}
	t.Logf("worker %d added after %.1fs of drain; the rebalance took %.1fs, %d outcomes applied meanwhile (at most %.1fs without one) while jobs kept coming (%d in all); shards of jobs per worker (port, count): %v; %s; all done %.1fs after the start",
		w, rebalancing.Sub(started).Seconds(), rebalanced.Seconds(), duringRebalance, stall.Seconds(), f.jobs, shards, f,
		time.Since(started).Seconds())
	t.Logf("logged: %s", d.log)
}
