package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
)

// ProcessesDrain is one drain of the -processes mode: the same one-step drain run by
// n server processes sharing the one PostgreSQL and the queue.
type ProcessesDrain struct {
	Processes int `json:"processes"`
	// Spread: each process drained a queue of its own (-spread).
	Spread bool  `json:"spread,omitempty"`
	Drain  Drain `json:"drain"`
	// ClaimCalls and ClaimRows are the claims' calls and rows in pg_stat_statements
	// (JobClaimPlain and JobClaimBatch).
	ClaimCalls int64 `json:"claim_calls"`
	ClaimRows  int64 `json:"claim_rows"`
	// OutcomeCalls and OutcomeRows are the outcome statements' calls and rows.
	OutcomeCalls int64 `json:"outcome_calls"`
	OutcomeRows  int64 `json:"outcome_rows"`
	// With -pace: the jobs' time from insert to done (their updated_at - created_at).
	LatencyP50ms float64 `json:"latency_p50_ms,omitempty"`
	LatencyP99ms float64 `json:"latency_p99_ms,omitempty"`
	// ReadyCalls are JobReadyExists's calls: each reads jobs_pick too (about one entry).
	ReadyCalls int64 `json:"ready_exists_calls"`
	// PickEntries and PickFetched are idx_tup_read and idx_tup_fetch of jobs_pick over
	// the drain: the index entries the claims (and JobReadyExists) read, and the live
	// rows those entries led to. A dead entry (a row claimed earlier, not yet killed in
	// the index) is read but not fetched; a row another process's claim holds is
	// fetched, then passed over by SKIP LOCKED (or dropped by the recheck when that claim
	// has committed) and not returned.
	PickEntries int64 `json:"jobs_pick_entries_read"`
	PickFetched int64 `json:"jobs_pick_rows_fetched"`
	// Lock samples every 10 ms over the drain: ungranted pg_locks rows, and backends
	// whose wait_event_type is Lock.
	Samples       int     `json:"lock_samples"`
	UngrantedMax  int64   `json:"ungranted_locks_max"`
	UngrantedMean float64 `json:"ungranted_locks_mean"`
	WaitingMax    int64   `json:"lock_waiters_max"`
	WaitingMean   float64 `json:"lock_waiters_mean"`
}

// skippedPerClaim is the live rows a claim's scan met but did not return: rows SKIP
// LOCKED passed over because another process's claim held them, or lost to one that had
// just committed. JobReadyExists fetches at most one row a call; all of its calls are
// taken off, so this is a lower bound when it ran.
func (p ProcessesDrain) skippedPerClaim() float64 {
	if p.ClaimCalls == 0 {
		return 0
	}
	return float64(p.PickFetched-p.ClaimRows-p.ReadyCalls) / float64(p.ClaimCalls)
}

// deadPerClaim is the dead jobs_pick entries a claim read (entries read, not fetched).
func (p ProcessesDrain) deadPerClaim() float64 {
	if p.ClaimCalls == 0 {
		return 0
	}
	return float64(p.PickEntries-p.PickFetched) / float64(p.ClaimCalls)
}

// runProcesses runs the -processes mode alone: for each count n, n fresh server
// processes on the bench's database, one -jobs one-step drain inserted through the
// first one's batch API into a paused queue and then resumed, the servers stopped
// (SIGTERM, waited for) before the next count; then the table.
func runProcesses(ctx context.Context, o options, db *pg.DB, database, recvAddr string, recvPid int) error {
	lockDB, err := openProbe(ctx, o.databaseURL)
	if err != nil {
		return err
	}
	defer lockDB.Close()
	m, err := newMeter(ctx, db, recvPid, lockDB)
	if err != nil {
		return err
	}
	var rows []ProcessesDrain
	for i, n := range o.processes {
		r, err := drainProcesses(ctx, o, m, db, lockDB, database, recvAddr, n, i+1)
		if err != nil {
			return fmt.Errorf("%d processes: %w", n, err)
		}
		rows = append(rows, r)
	}
	printProcesses(os.Stdout, rows, o)
	if o.jsonOut != "" {
		b, _ := json.MarshalIndent(map[string]any{"outcome_batch": o.outcomeBatch, "max_in_flight_per_process": o.maxInFlight,
			"batch": o.batch, "processes": rows}, "", "  ")
		return os.WriteFile(o.jsonOut, b, 0o644)
	}
	return nil
}

// drainProcesses is the row-th row of the -processes table: n servers started, the
// drain (on a queue of its own, so a count may come twice in the list), the servers
// stopped.
func drainProcesses(ctx context.Context, o options, m *meter, db, lockDB *pg.DB, database, recvAddr string, n, row int) (ProcessesDrain, error) {
	var servers []*exec.Cmd
	defer func() {
		for _, srv := range servers {
			stopServer(srv)
		}
	}()
	var apis, pprofAddrs []string
	var pids []int
	// The drain's queue; with -spread, one for each process (queue-1, queue-2, ...), each
	// served by its process alone and holding its share of the backlog.
	queue := fmt.Sprintf("processes-%d-%d", row, n)
	queues := []string{queue}
	if o.spread {
		queues = nil
		for k := range n {
			queues = append(queues, fmt.Sprintf("%s-%d", queue, k+1))
		}
	}
	for k := range n {
		var env []string
		if o.spread {
			env = append(env, "GENDURABLE_QUEUES="+queues[k])
		}
		apiAddr, pprofAddr := freeAddr(), freeAddr()
		srv, err := startServer(o, apiAddr, pprofAddr, env...)
		if err != nil {
			return ProcessesDrain{}, err
		}
		servers = append(servers, srv)
		apis = append(apis, "http://"+apiAddr)
		pprofAddrs = append(pprofAddrs, pprofAddr)
		pids = append(pids, srv.Process.Pid)
	}
	for _, api := range apis {
		if err := waitReady(api); err != nil {
			return ProcessesDrain{}, err
		}
	}
	api := apis[0]
	if err := putHandler(api, recvAddr); err != nil {
		return ProcessesDrain{}, err
	}
	jobs := o.jobs
	if o.pace > 0 { // jobs arrive during the drain, at pace a second for each process
		jobs = int(float64(n) * o.pace * o.paceFor.Seconds())
	}
	for k, q := range queues {
		if err := call(api, "PUT", "/v1/queues/"+q, fmt.Sprintf(`{"paused": %t, "max_in_flight": %d, "batch": %d}`,
			o.pace == 0, o.maxInFlight, o.batch)); err != nil {
			return ProcessesDrain{}, err
		}
		if o.pace == 0 { // the backlog, split evenly among the queues
			share := jobs/len(queues) + min(1, max(0, jobs%len(queues)-k))
			if _, err := bulkInsert(api, "bench", q, share, 1, 1, o.insertBatch); err != nil {
				return ProcessesDrain{}, err
			}
		}
	}
	if err := vacuumAnalyze(ctx, o, db, "jobs"); err != nil {
		return ProcessesDrain{}, err
	}
	time.Sleep(statsSettle) // index statistics lag as table statistics do
	read0, fetched0, err := pickEntries(ctx, db)
	if err != nil {
		return ProcessesDrain{}, err
	}
	served, err := receiverStats(recvAddr)
	if err != nil {
		return ProcessesDrain{}, err
	}
	target := served["requests"] + int64(jobs)
	sampler := &lockSampler{db: lockDB}
	arrivals, arrived := make(chan error, 1), false // with -pace: the arrivals' end
	var profiles sync.WaitGroup
	s := side{name: fmt.Sprintf("%d processes", n), pids: pids, database: database,
		start: func() error {
			sampler.start(ctx)
			if o.cpuProfile != "" { // each server's profile, from the start of the drain
				for k, addr := range pprofAddrs {
					path := fmt.Sprintf("%s.%dp.%d", o.cpuProfile, n, k+1)
					profiles.Go(func() {
						if err := captureProfile(addr, path, o.profileFor); err != nil {
							fmt.Fprintln(os.Stderr, "bench: profile:", err)
						}
					})
				}
			}
			if o.pace > 0 {
				go func() { arrivals <- arrive(apis, queue, jobs, float64(n)*o.pace, o.paceBatch) }()
				return nil
			}
			for _, q := range queues {
				if err := resumeQueue(api, q); err != nil {
					return err
				}
			}
			return nil
		},
		// The receiver's count first (no statement), then one probe that every outcome
		// is written: the poll reads no jobs_pick entry.
		finished: func(ctx context.Context) (bool, error) {
			if o.pace > 0 && !arrived {
				select {
				case err := <-arrivals:
					if err != nil {
						return false, err
					}
					arrived = true
				default:
					return false, nil
				}
			}
			st, err := receiverStats(recvAddr)
			if err != nil || st["requests"] < target {
				return false, err
			}
			left, err := db.QueryInt(ctx, `-- probe
				SELECT count(*) FROM jobs WHERE status = 'executing' AND queue = ANY($1)`, queues)
			if left == 0 && err == nil {
				sampler.stop()
			}
			return left == 0, err
		}}
	d, err := m.drain(ctx, s, 0, jobs, 1)
	sampler.stop()
	profiles.Wait()
	if err != nil {
		return ProcessesDrain{}, err
	}
	if done, err := db.QueryInt(ctx, `-- probe
		SELECT count(*) FROM jobs WHERE queue = ANY($1) AND status = 'done'`, queues); err != nil {
		return ProcessesDrain{}, err
	} else if done != int64(jobs) {
		return ProcessesDrain{}, fmt.Errorf("%s: %d of %d jobs done", queue, done, jobs)
	}
	time.Sleep(statsSettle)
	read1, fetched1, err := pickEntries(ctx, db)
	if err != nil {
		return ProcessesDrain{}, err
	}
	r := ProcessesDrain{Processes: n, Spread: o.spread, Drain: d, PickEntries: read1 - read0, PickFetched: fetched1 - fetched0}
	for _, st := range d.Statements {
		switch st.Name {
		case "JobClaimBatch", "JobClaimPlain":
			r.ClaimCalls, r.ClaimRows = r.ClaimCalls+st.Calls, r.ClaimRows+st.Rows
		case "JobApplyOutcomes", "JobApplyOutcomesCrediting", "JobApplyPlainOutcomes":
			r.OutcomeCalls, r.OutcomeRows = r.OutcomeCalls+st.Calls, r.OutcomeRows+st.Rows
		case "JobReadyExists":
			r.ReadyCalls = st.Calls
		}
	}
	r.Samples, r.UngrantedMax, r.UngrantedMean, r.WaitingMax, r.WaitingMean = sampler.summary()
	if o.pace > 0 {
		ms, err := db.QueryStrings(ctx, `-- probe
			SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY lat), percentile_cont(0.99) WITHIN GROUP (ORDER BY lat)
			FROM (SELECT extract(epoch FROM updated_at - created_at) * 1000 AS lat FROM jobs WHERE queue = $1) l`, queue)
		if err != nil {
			return ProcessesDrain{}, err
		}
		r.LatencyP50ms, _ = strconv.ParseFloat(ms[0][0], 64)
		r.LatencyP99ms, _ = strconv.ParseFloat(ms[0][1], 64)
	}
	return r, nil
}

// arrive inserts jobs one-step jobs into queue at rate jobs a second, in calls of batch
// jobs sent to the servers in turn (as a load balancer would), each call at its time on
// a fixed schedule (a late call does not delay the next); it returns when all are in.
func arrive(apis []string, queue string, jobs int, rate float64, batch int) error {
	interval := time.Duration(float64(batch) / rate * float64(time.Second))
	start := time.Now()
	errs := make(chan error, jobs/batch+1)
	var calls sync.WaitGroup
	for k, sent := 0, 0; sent < jobs; k++ {
		size := min(batch, jobs-sent)
		sent += size
		time.Sleep(time.Until(start.Add(time.Duration(k) * interval)))
		calls.Go(func() {
			if _, err := bulkInsert(apis[k%len(apis)], "bench", queue, size, 1, 1, size); err != nil {
				errs <- err
			}
		})
	}
	calls.Wait()
	close(errs)
	return <-errs // nil when none failed
}

// pickEntries is idx_tup_read and idx_tup_fetch of the jobs_pick index so far.
func pickEntries(ctx context.Context, db *pg.DB) (read, fetched int64, err error) {
	rows, err := db.QueryStrings(ctx, `-- probe
		SELECT coalesce(sum(idx_tup_read), 0)::bigint, coalesce(sum(idx_tup_fetch), 0)::bigint
		FROM pg_stat_user_indexes WHERE indexrelname = 'jobs_pick'`)
	if err != nil {
		return 0, 0, err
	}
	read, _ = strconv.ParseInt(rows[0][0], 10, 64)
	fetched, _ = strconv.ParseInt(rows[0][1], 10, 64)
	return read, fetched, nil
}

// lockSampler counts, every 10 ms on its own connection, the ungranted locks of the
// cluster and the backends waiting on a lock, from start until stop.
type lockSampler struct {
	db       *pg.DB
	once     sync.Once
	quit     chan struct{}
	done     chan struct{}
	err      error
	ungrant  []int64
	waiting  []int64
	stopOnce sync.Once
}

func (l *lockSampler) start(ctx context.Context) {
	l.once.Do(func() {
		l.quit, l.done = make(chan struct{}), make(chan struct{})
		go func() {
			defer close(l.done)
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-l.quit:
					return
				case <-tick.C:
				}
				rows, err := l.db.QueryStrings(ctx, `-- probe
					SELECT (SELECT count(*) FROM pg_locks WHERE NOT granted),
					       (SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock')`)
				if err != nil {
					l.err = err
					return
				}
				u, _ := strconv.ParseInt(rows[0][0], 10, 64)
				w, _ := strconv.ParseInt(rows[0][1], 10, 64)
				l.ungrant, l.waiting = append(l.ungrant, u), append(l.waiting, w)
			}
		}()
	})
}

// stop ends the sampling and waits for the sampler (a no-op before start, or twice).
func (l *lockSampler) stop() {
	if l.quit == nil {
		return
	}
	l.stopOnce.Do(func() { close(l.quit); <-l.done })
}

// summary is the count of samples and the max and mean of each series.
func (l *lockSampler) summary() (samples int, ungrantedMax int64, ungrantedMean float64, waitingMax int64, waitingMean float64) {
	if l.err != nil {
		fmt.Fprintln(os.Stderr, "bench: lock sampler:", l.err)
	}
	ungrantedMax, ungrantedMean = maxMean(l.ungrant)
	waitingMax, waitingMean = maxMean(l.waiting)
	return len(l.ungrant), ungrantedMax, ungrantedMean, waitingMax, waitingMean
}

func maxMean(v []int64) (int64, float64) {
	var most, sum int64
	for _, x := range v {
		most = max(most, x)
		sum += x
	}
	if len(v) == 0 {
		return 0, 0
	}
	return most, float64(sum) / float64(len(v))
}

// printProcesses prints the -processes table, one row per count of server processes.
func printProcesses(out io.Writer, rows []ProcessesDrain, o options) {
	drain := fmt.Sprintf("a %d-job one-step drain each (a backlog inserted through one server beforehand", o.jobs)
	if o.spread {
		drain = fmt.Sprintf("a %d-job one-step drain each, split evenly among the processes' queues, each process serving its own (a backlog inserted through one server beforehand", o.jobs)
	}
	if o.pace > 0 {
		drain = fmt.Sprintf("one-step jobs arriving at %g a second for each process for %s (%d a call, to the servers in turn", o.pace, o.paceFor, o.paceBatch)
	}
	fmt.Fprintf(out, "server processes on one PostgreSQL — %s; queue max_in_flight %d per process, batch %d, outcome batch %d), %s\n\n",
		drain, o.maxInFlight, o.batch, o.outcomeBatch, time.Now().UTC().Format(time.RFC3339))
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "processes\tsteps/s\tstmts/step\tclaims/step\trows/claim\trows/outcome stmt\tskipped/claim\tdead/claim\t"+
		"lock samples\tungranted max\tungranted mean\tLock waits max\tLock waits mean\t"+
		"CPU µs servers\tCPU µs PostgreSQL\tCPU µs receiver\tCPU µs total\tWAL B/step\tswitches/step\tlatency p50 ms\tp99 ms\t")
	for _, r := range rows {
		d := r.Drain
		steps := float64(d.Steps)
		rowsPerClaim, rowsPerOutcome := 0.0, 0.0
		if r.ClaimCalls > 0 {
			rowsPerClaim = float64(r.ClaimRows) / float64(r.ClaimCalls)
		}
		if r.OutcomeCalls > 0 {
			rowsPerOutcome = float64(r.OutcomeRows) / float64(r.OutcomeCalls)
		}
		cpu := d.CPUMicros
		fmt.Fprintf(w, "%d\t%.0f\t%.3f\t%.4f\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%d\t%.2f\t%d\t%.2f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.1f\t%.1f\t%.1f\t\n",
			r.Processes, d.PerSecond, d.StatementsStep, float64(r.ClaimCalls)/steps, rowsPerClaim, rowsPerOutcome, r.skippedPerClaim(), r.deadPerClaim(),
			r.Samples, r.UngrantedMax, r.UngrantedMean, r.WaitingMax, r.WaitingMean,
			cpu[procEngine], cpu[procPostgres], cpu[procReceiver], cpu[procEngine]+cpu[procPostgres]+cpu[procReceiver], d.WALBytesStep, d.SwitchesStep, r.LatencyP50ms, r.LatencyP99ms)
	}
	_ = w.Flush()
	fmt.Fprintln(out, "\nskipped/claim: jobs_pick rows fetched (idx_tup_fetch) minus rows claimed minus JobReadyExists calls, "+
		"per claim: rows the scan met held by another process's claim (SKIP LOCKED) or just claimed by one. "+
		"dead/claim: entries read (idx_tup_read) but not fetched: rows claimed earlier, still in the index. "+
		"Locks: pg_locks NOT granted and pg_stat_activity wait_event_type = 'Lock', sampled every 10 ms over the drain. "+
		"CPU: utime+stime per step, the server processes summed. switches/step: the machine's context switches (/proc/stat ctxt) per step.")
}
