// Command bench measures gendurable end to end on this machine: the real server binary,
// a real PostgreSQL, and a webhook receiver in a separate process on loopback. It reports
// drain throughput (one-step and five-step jobs), insert→webhook latency at a light
// steady rate, bulk insert throughput through POST /v1/jobs/batch, and per step: SQL
// statements, WAL records and bytes, tuples written; and the server's peak RSS.
//
//	go run ./cmd/bench                         # defaults below; make bench runs this
//	go run ./cmd/bench -outcome-batch 1        # the same with outcome batching off
//	go run ./cmd/bench -json bench.json        # also write the results as JSON
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
)

type options struct {
	databaseURL  string
	server       string
	jobs         int
	fiveStepJobs int
	bulk         int
	latencyRate  int
	latencyFor   time.Duration
	outcomeBatch int
	maxInFlight  int
	batch        int
	jsonOut      string
	bulkClients  int
	cpuProfile   string
}

// Result is one scenario's figures.
type Result struct {
	Scenario       string           `json:"scenario"`
	Jobs           int              `json:"jobs"`
	Steps          int              `json:"steps"`
	Seconds        float64          `json:"seconds"`
	PerSecond      float64          `json:"per_second"`
	StatementsStep float64          `json:"statements_per_step,omitempty"`
	WALRecordsStep float64          `json:"wal_records_per_step,omitempty"`
	WALBytesStep   float64          `json:"wal_bytes_per_step,omitempty"`
	InsertedStep   float64          `json:"tuples_inserted_per_step,omitempty"`
	UpdatedStep    float64          `json:"tuples_updated_per_step,omitempty"`
	DeletedStep    float64          `json:"tuples_deleted_per_step,omitempty"`
	P50ms          float64          `json:"p50_ms,omitempty"`
	P95ms          float64          `json:"p95_ms,omitempty"`
	P99ms          float64          `json:"p99_ms,omitempty"`
	Statements     map[string]int64 `json:"statements,omitempty"`
}

func main() {
	if len(os.Args) > 2 && os.Args[1] == "receiver" {
		runReceiver(os.Args[2])
		return
	}
	var o options
	flag.StringVar(&o.databaseURL, "database-url", os.Getenv("BENCH_DATABASE_URL"), "PostgreSQL to use (default: a throwaway cluster)")
	flag.StringVar(&o.server, "server", "", "gendurable server binary (default: built from ./cmd/server)")
	flag.IntVar(&o.jobs, "jobs", 20000, "one-step jobs to drain")
	flag.IntVar(&o.fiveStepJobs, "five-step-jobs", 4000, "five-step jobs to drain")
	flag.IntVar(&o.bulk, "bulk", 100000, "jobs to insert through the batch endpoint (10 000 per request)")
	flag.IntVar(&o.latencyRate, "latency-rate", 100, "jobs per second for the latency run")
	flag.DurationVar(&o.latencyFor, "latency-for", 5*time.Second, "length of the latency run")
	flag.IntVar(&o.outcomeBatch, "outcome-batch", 128, "GENDURABLE_OUTCOME_BATCH of the server (1 = unbatched)")
	flag.IntVar(&o.maxInFlight, "max-in-flight", 200, "max_in_flight of the drained queues")
	flag.IntVar(&o.batch, "batch", 100, "batch of the drained queues")
	flag.StringVar(&o.jsonOut, "json", "", "also write the results to this JSON file")
	flag.IntVar(&o.bulkClients, "bulk-clients", 4, "concurrent clients of the bulk insert")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the server during the one-step drain to this file")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	ctx := context.Background()
	tmp, err := os.MkdirTemp("", "gdbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if o.databaseURL == "" {
		pgDir, err := os.MkdirTemp("", "gdbench-pg") // its own top directory: the postgres user must reach it
		if err != nil {
			return err
		}
		defer os.RemoveAll(pgDir)
		c, err := pg.StartCluster(ctx, pg.ClusterOptions{Dir: pgDir})
		if err != nil {
			return err
		}
		defer c.Stop()
		if err := pg.EnsureDatabase(ctx, c.URL("postgres"), "bench"); err != nil {
			return err
		}
		o.databaseURL = c.URL("bench")
	}
	db, err := pg.Open(ctx, o.databaseURL, pg.Options{MaxConns: 4})
	if err != nil {
		return err
	}
	defer db.Close()
	if o.server == "" {
		o.server = filepath.Join(tmp, "gendurable")
		build := exec.Command("go", "build", "-o", o.server, "./cmd/server")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("building the server: %w", err)
		}
	}
	recvAddr, stopRecv, err := startReceiver()
	if err != nil {
		return err
	}
	defer stopRecv()
	apiAddr, pprofAddr := freeAddr(), freeAddr()
	srv := exec.Command(o.server)
	srv.Env = append(os.Environ(), "DATABASE_URL="+o.databaseURL, "GENDURABLE_ADDR="+apiAddr, "GENDURABLE_PPROF_ADDR="+pprofAddr,
		"GENDURABLE_ALLOW_PRIVATE_WEBHOOKS=true", "GENDURABLE_LOG_LEVEL=warn",
		"GENDURABLE_OUTCOME_BATCH="+strconv.Itoa(o.outcomeBatch))
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		return err
	}
	defer func() { _ = srv.Process.Signal(syscall.SIGTERM); _ = srv.Wait() }()
	api := "http://" + apiAddr
	if err := waitReady(api); err != nil {
		return err
	}
	if _, err := db.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		return fmt.Errorf("pg_stat_statements is needed for the per-step counters: %w", err)
	}
	if err := call(api, "PUT", "/v1/handlers/bench", fmt.Sprintf(`{"url": "http://%s/steps", "secret": %q}`, recvAddr, benchSecret)); err != nil {
		return err
	}
	var results []Result

	// Bulk insert, into a paused queue (the jobs are drained below).
	for _, q := range []string{"drain1", "drain5"} {
		if err := call(api, "PUT", "/v1/queues/"+q, fmt.Sprintf(`{"paused": true, "max_in_flight": %d, "batch": %d}`, o.maxInFlight, o.batch)); err != nil {
			return err
		}
	}
	bulk, err := bulkInsert(api, "drain1", o.bulk, 1, o.bulkClients)
	if err != nil {
		return err
	}
	results = append(results, bulk)
	// Drain the first o.jobs of them (the rest are cancelled out of the way first).
	if o.bulk > o.jobs {
		if _, err := db.Exec(ctx, `-- probe
			UPDATE jobs SET status = 'cancelled', finished_at = now() WHERE queue = 'drain1' AND id > (SELECT min(id) FROM jobs) + $1 - 1`, o.jobs); err != nil {
			return err
		}
	}
	var profile chan error
	if o.cpuProfile != "" {
		profile = make(chan error, 1)
		go func() { profile <- captureProfile(pprofAddr, o.cpuProfile, statsSettle+4*time.Second) }()
	}
	one, err := drain(ctx, db, api, "drain1", o.jobs, 1)
	if err != nil {
		return err
	}
	if profile != nil {
		if err := <-profile; err != nil {
			return err
		}
	}
	results = append(results, one)
	if _, err := bulkInsert(api, "drain5", o.fiveStepJobs, 5, 1); err != nil {
		return err
	}
	five, err := drain(ctx, db, api, "drain5", o.fiveStepJobs, 5)
	if err != nil {
		return err
	}
	results = append(results, five)
	lat, err := latency(api, recvAddr, o.latencyRate, o.latencyFor)
	if err != nil {
		return err
	}
	results = append(results, lat)

	rss := peakRSS(srv.Process.Pid)
	print(results, o, rss)
	if o.jsonOut != "" {
		b, _ := json.MarshalIndent(map[string]any{"outcome_batch": o.outcomeBatch, "server_peak_rss_kb": rss, "results": results}, "", "  ")
		return os.WriteFile(o.jsonOut, b, 0o644)
	}
	return nil
}

func startReceiver() (string, func(), error) {
	cmd := exec.Command(os.Args[0], "receiver", "127.0.0.1:0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return "", nil, fmt.Errorf("receiver did not start: %w", err)
	}
	return strings.TrimSpace(line), func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }, nil
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitReady(api string) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if r, err := http.Get(api + "/readyz"); err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("the server never became ready")
}

var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

func call(api, method, path, body string) error {
	_, err := callBody(api, method, path, body)
	return err
}

func callBody(api, method, path, body string) ([]byte, error) {
	req, _ := http.NewRequest(method, api+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return nil, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return b, nil
}

// bulkInsert inserts n jobs through POST /v1/jobs/batch, 10 000 per request, from
// `clients` concurrent clients (a bulk loader's usual shape).
func bulkInsert(api, queue string, n, steps, clients int) (Result, error) {
	const per = 10000
	body := func(k int) string {
		var b bytes.Buffer
		b.WriteString(`{"jobs":[`)
		for i := range k {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"handler":"bench","queue":%q,"input":{"steps":%d}}`, queue, steps)
		}
		b.WriteString(`]}`)
		return b.String()
	}
	full := body(per)
	requests := make(chan string, n/per+1)
	for done := 0; done < n; done += per {
		if k := min(per, n-done); k == per {
			requests <- full
		} else {
			requests <- body(k)
		}
	}
	close(requests)
	started := time.Now()
	errs := make(chan error, clients)
	for range clients {
		go func() {
			for body := range requests {
				if err := call(api, "POST", "/v1/jobs/batch", body); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range clients {
		if err := <-errs; err != nil {
			return Result{}, err
		}
	}
	secs := time.Since(started).Seconds()
	return Result{Scenario: fmt.Sprintf("bulk insert (POST /v1/jobs/batch, 10 000 per request, %d clients)", clients),
		Jobs: n, Seconds: secs, PerSecond: float64(n) / secs}, nil
}

// counters is a snapshot of what the database did, excluding the bench's own probes.
type counters struct {
	calls                      map[string]int64
	walRecords, walBytes       int64
	inserted, updated, deleted int64
}

func snapshot(ctx context.Context, db *pg.DB) (counters, error) {
	c := counters{calls: map[string]int64{}}
	rows, err := db.QueryStrings(ctx, `-- probe
		SELECT coalesce(substring(query FROM '-- name: (\w+)'), 'other'), sum(calls)::bigint, sum(wal_records)::bigint, sum(wal_bytes)::bigint
		FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND query NOT LIKE '-- probe%'
		GROUP BY 1`)
	if err != nil {
		return c, err
	}
	for _, r := range rows {
		n, _ := strconv.ParseInt(r[1], 10, 64)
		wr, _ := strconv.ParseInt(r[2], 10, 64)
		wb, _ := strconv.ParseFloat(r[3], 64)
		c.calls[r[0]] += n
		c.walRecords += wr
		c.walBytes += int64(wb)
	}
	rows, err = db.QueryStrings(ctx, `-- probe
		SELECT sum(n_tup_ins)::bigint, sum(n_tup_upd)::bigint, sum(n_tup_del)::bigint FROM pg_stat_user_tables`)
	if err != nil {
		return c, err
	}
	c.inserted, _ = strconv.ParseInt(rows[0][0], 10, 64)
	c.updated, _ = strconv.ParseInt(rows[0][1], 10, 64)
	c.deleted, _ = strconv.ParseInt(rows[0][2], 10, 64)
	return c, nil
}

// statsSettle is how long table statistics may lag: PostgreSQL 15 backends report them
// when idle, at most every 10 seconds.
const statsSettle = 11 * time.Second

func drain(ctx context.Context, db *pg.DB, api, queue string, jobs, steps int) (Result, error) {
	time.Sleep(statsSettle)
	before, err := snapshot(ctx, db)
	if err != nil {
		return Result{}, err
	}
	started := time.Now()
	if err := call(api, "PUT", "/v1/queues/"+queue, `{"paused": false}`); err != nil {
		return Result{}, err
	}
	for {
		n, err := db.QueryInt(ctx, `-- probe
			SELECT count(*) FROM jobs WHERE queue = $1 AND status = 'done'`, queue)
		if err != nil {
			return Result{}, err
		}
		if n >= int64(jobs) {
			break
		}
		if time.Since(started) > 10*time.Minute {
			return Result{}, fmt.Errorf("%s: only %d of %d jobs done after 10 minutes", queue, n, jobs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	secs := time.Since(started).Seconds()
	time.Sleep(statsSettle)
	after, err := snapshot(ctx, db)
	if err != nil {
		return Result{}, err
	}
	total := float64(jobs * steps)
	r := Result{Scenario: fmt.Sprintf("drain of %d %d-step jobs", jobs, steps), Jobs: jobs, Steps: jobs * steps,
		Seconds: secs, PerSecond: total / secs, Statements: map[string]int64{}}
	var stmts int64
	for name, n := range after.calls {
		d := n - before.calls[name]
		if d > 0 && name != "QueueUpsert" && name != "QueueCounts" && !strings.HasPrefix(name, "Handler") {
			r.Statements[name] = d
			stmts += d
		}
	}
	r.StatementsStep = float64(stmts) / total
	r.WALRecordsStep = float64(after.walRecords-before.walRecords) / total
	r.WALBytesStep = float64(after.walBytes-before.walBytes) / total
	r.InsertedStep = float64(after.inserted-before.inserted) / total
	r.UpdatedStep = float64(after.updated-before.updated) / total
	r.DeletedStep = float64(after.deleted-before.deleted) / total
	return r, nil
}

func latency(api, recvAddr string, rate int, dur time.Duration) (Result, error) {
	if err := call(api, "PUT", "/v1/queues/latency", `{"max_in_flight": 100, "batch": 50}`); err != nil {
		return Result{}, err
	}
	inserted := map[int64]int64{}
	interval := time.Second / time.Duration(rate)
	end := time.Now().Add(dur)
	for next := time.Now(); time.Now().Before(end); next = next.Add(interval) {
		time.Sleep(time.Until(next))
		at := time.Now().UnixNano()
		b, err := callBody(api, "POST", "/v1/jobs", `{"handler":"bench","queue":"latency","input":{"steps":1}}`)
		if err != nil {
			return Result{}, err
		}
		var j struct{ ID int64 }
		_ = json.Unmarshal(b, &j)
		inserted[j.ID] = at
	}
	time.Sleep(time.Second)
	b, err := callBody("http://"+recvAddr, "GET", "/seen", "")
	if err != nil {
		return Result{}, err
	}
	var seen map[string]int64
	if err := json.Unmarshal(b, &seen); err != nil {
		return Result{}, err
	}
	var lat []float64
	for id, at := range inserted {
		if got, ok := seen[strconv.FormatInt(id, 10)]; ok {
			lat = append(lat, float64(got-at)/1e6)
		}
	}
	if len(lat) == 0 {
		return Result{}, fmt.Errorf("the receiver saw none of the latency jobs")
	}
	sort.Float64s(lat)
	pct := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	return Result{Scenario: fmt.Sprintf("insert→webhook latency at %d jobs/s", rate), Jobs: len(lat),
		Seconds: dur.Seconds(), PerSecond: float64(len(lat)) / dur.Seconds(), P50ms: pct(0.50), P95ms: pct(0.95), P99ms: pct(0.99)}, nil
}

// captureProfile records the server's CPU for d (started while the drain begins).
func captureProfile(addr, path string, d time.Duration) error {
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, int(d.Seconds())))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}

// peakRSS reads the process's high-water resident set (kB) from /proc.
func peakRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			n, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			return n
		}
	}
	return 0
}

func print(results []Result, o options, rss int64) {
	fmt.Printf("gendurable bench — outcome batch %d, queues max_in_flight %d batch %d, %s\n\n",
		o.outcomeBatch, o.maxInFlight, o.batch, time.Now().UTC().Format(time.RFC3339))
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "scenario\tjobs\tseconds\tper second\tstmts/step\tWAL rec/step\tWAL B/step\tins/step\tupd/step\tp50 ms\tp95 ms\tp99 ms\t")
	for _, r := range results {
		fmt.Fprintf(w, "%s\t%d\t%.2f\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Scenario, r.Jobs, r.Seconds, r.PerSecond,
			opt(r.StatementsStep, 3), opt(r.WALRecordsStep, 2), opt(r.WALBytesStep, 0), opt(r.InsertedStep, 2), opt(r.UpdatedStep, 2),
			opt(r.P50ms, 2), opt(r.P95ms, 2), opt(r.P99ms, 2))
	}
	_ = w.Flush()
	fmt.Printf("\nserver peak RSS: %.1f MiB\n", float64(rss)/1024)
	for _, r := range results {
		if len(r.Statements) > 0 {
			fmt.Printf("%s statements: %v\n", r.Scenario, r.Statements)
		}
	}
}

func opt(v float64, prec int) string {
	if v == 0 {
		return "—"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}
