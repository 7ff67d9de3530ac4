package dispatch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/dispatch"
	"github.com/gendurable/gendurable/internal/engine"
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
	db  *pg.DB // the test's own pool: inserts, settings and what it watches
	rcv *receiver
	log *logTally
	ids []int64
	// nodeOf is the port of the worker that holds each placement's shard, read at the start.
	nodeOf [pg.Placements]int
	// hold is the webhook's gate: the steps of the jobs on the worker holdPort wait in it
	// until release closes (holdSteps, releaseSteps).
	hold struct {
		sync.Mutex
		port    int
		held    []webhook.Job
		release chan struct{}
	}
}

// holdSteps makes the webhook hold the steps of the jobs on the worker on port until
// releaseSteps: steps in flight on that worker, for as long as the test needs them.
func (d *faultDrain) holdSteps(port int) {
	d.hold.Lock()
	defer d.hold.Unlock()
	d.hold.port, d.hold.release = port, make(chan struct{})
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
	d.hold.port = 0
	close(d.hold.release)
}

// wait holds the step of job in the webhook if holdSteps asks for it.
func (d *faultDrain) wait(ctx context.Context, job webhook.Job) {
	d.hold.Lock()
	port, release := d.hold.port, d.hold.release
	if port != 0 && d.nodeOf[job.ID%pg.Placements] == port {
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
func newFaultDrain(t *testing.T, jobs int) *faultDrain {
	t.Helper()
	own := pgtest.NewOwnCitus(t)
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
	maxAttempts, base, timeout := 100, 10, 5000
	if _, err := d.db.HandlerUpsert(ctx, pg.HandlerUpsert{Name: "h", URL: d.rcv.URL, Secret: ptr(testSecret),
		MaxAttempts: &maxAttempts, BackoffBaseMS: &base, TimeoutMS: &timeout}); err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(d.db, engine.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for len(d.ids) < jobs {
		batch := make([]engine.NewJob, min(8, jobs-len(d.ids)))
		for i := range batch {
			batch[i] = engine.NewJob{Handler: "h"}
		}
		got, err := eng.InsertJobs(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range got {
			d.ids = append(d.ids, j.ID)
		}
	}
	if _, err := d.db.QueueUpsert(ctx, pg.QueueUpsert{Name: "default", MaxInFlight: ptr(64), Batch: ptr(32)}); err != nil {
		t.Fatal(err)
	}
	rows, err := d.db.QueryStrings(ctx, `SELECT v.p, n.nodeport FROM generate_series(0, $1 - 1) AS v(p)
		JOIN pg_dist_placement pl ON pl.shardid = get_shard_id_for_distribution_column('jobs', v.p)
		JOIN pg_dist_node n ON n.groupid = pl.groupid`, pg.Placements)
	if err != nil || len(rows) != pg.Placements {
		t.Fatalf("the placements' workers: %d rows, %v", len(rows), err)
	}
	for _, r := range rows {
		p, _ := strconv.Atoi(r[0])
		d.nodeOf[p], _ = strconv.Atoi(r[1])
	}
	return d
}

// start starts the two dispatchers (each its own engine and pool, as two server
// processes) and a reaper, with leases of ttl.
func (d *faultDrain) start(t *testing.T, ttl time.Duration) {
	t.Helper()
	for i := range 2 {
		db := pgtest.Open(t, d.own.URL, pg.Options{MaxConns: 10})
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
	for _, id := range d.ids {
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
	total := len(d.ids) * faultSteps
	d.waitCount(t, nil, jobsDone, len(d.ids), timeout, "every job done")
	f := faultFigures{jobs: len(d.ids)}
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
	for _, id := range d.ids {
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
		t.Errorf("%d applied outcomes, want %d (%d jobs × %d steps)", f.applied, total, len(d.ids), faultSteps)
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
}

func (l *logTally) logger() *slog.Logger { return slog.New(l) }

func (l *logTally) Enabled(_ context.Context, level slog.Level) bool { return level >= slog.LevelWarn }

func (l *logTally) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counts[r.Message]++
	if l.first == nil {
		l.first = map[string]string{}
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
// steps of its jobs in flight: the jobs on the other worker's shards go on to the end while
// it is down, and once it is back every job finishes, nothing lost, no outcome applied
// twice. The steps that were in flight on the stopped worker, whose outcomes could not be
// written, are delivered again after their lease expired: that is the at-least-once the
// design allows, and all it allows (no step of the live worker runs twice).
func TestCitusWorkerDownDuringADrain(t *testing.T) {
	t.Parallel()
	const jobs = 1200
	d := newFaultDrain(t, jobs)
	const down = 2 // the worker stopped; worker 1 stays up
	live := d.placementsOn(d.own.Port(1))
	liveJobs := d.jobsOn(d.own.Port(1))
	if liveJobs == 0 || liveJobs == jobs {
		t.Fatalf("%d of %d jobs on worker 1: the jobs are not spread over both workers", liveJobs, jobs)
	}
	started := time.Now()
	d.start(t, 8*time.Second)
	d.waitCount(t, nil, outcomesApplied, jobs/2, time.Minute, "the drain under way")
	// Some steps of the worker about to stop are in flight (held in the webhook) when it stops.
	d.holdSteps(d.own.Port(down))
	dispatch.WaitUntil(t, 30*time.Second, "steps of worker 2 in flight", func() bool { return len(d.heldSteps()) >= 8 })
	d.own.StopNodeImmediately(down)
	stopped := time.Now()
	d.releaseSteps()
	atStop := d.mustCount(t, live, outcomesApplied)
	// While it is down, every job on the live worker finishes.
	d.waitCount(t, live, jobsDone, liveJobs, time.Minute, "the live worker's jobs finishing while the other is down")
	duringOutage := d.mustCount(t, live, outcomesApplied) - atStop
	if err := d.own.RestartNode(context.Background(), down); err != nil {
		t.Fatal(err)
	}
	downFor := time.Since(stopped)
	f := d.check(t, time.Minute)
	// Each step held in flight ended by lease expiry (its outcome could not be written) and
	// ran again; no step of the live worker did.
	rows, err := d.db.QueryStrings(context.Background(), `SELECT job_id, step, attempt, placement FROM steps WHERE outcome = 'lease_expired'`)
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
		if !expired[[3]int64{j.ID, int64(j.Step), int64(j.Attempt)}] {
			t.Errorf("job %d step %d attempt %d, in flight when its worker stopped: not ended by lease expiry", j.ID, j.Step, j.Attempt)
		}
	}
	t.Logf("worker %d stopped after %.1fs of drain with %d of its steps in flight, down %.1fs: %d outcomes applied on worker 1 meanwhile (its %d jobs all done); %s; all done %.1fs after the start",
		down, stopped.Sub(started).Seconds(), len(held), downFor.Seconds(), duringOutage, liveJobs, f, time.Since(started).Seconds())
	t.Logf("logged: %s", d.log)
}
