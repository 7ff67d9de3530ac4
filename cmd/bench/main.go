// Command bench measures gendurable end to end on this machine: the real server binary,
// a real PostgreSQL, and a webhook receiver in a separate process on loopback. It reports
// drain throughput (one-step and five-step jobs), insert→webhook latency at a light
// steady rate, bulk insert throughput through POST /v1/jobs/batch, and per step: SQL
// statements, WAL records and bytes, tuples written; and the server's peak RSS.
//
// Beside it runs a River peer (bench/river, a Go module of its own, built here): River
// on the same PostgreSQL (its own database), each job POSTing a signed body of the size
// ours sends to the same receiver process, at the same concurrency. The one-step drains
// alternate, gendurable then River, for -pairs pairs; for each side the bench prints
// throughput and the median ratio, CPU per step by process (server or River process, all
// PostgreSQL processes, receiver) over the drain window, the busiest statements from
// pg_stat_statements, and bulk inserts of -insert-batch jobs per call.
//
//	go run ./cmd/bench                         # defaults below; make bench runs this
//	go run ./cmd/bench -peer=false             # gendurable only (no River)
//	go run ./cmd/bench -only river             # the River drains only
//	go run ./cmd/bench -outcome-batch 1        # the same with outcome batching off
//	go run ./cmd/bench -json bench.json        # also write the results as JSON
//	go run ./cmd/bench -processes 1,2,3        # only the drains by 1, 2 and 3 server processes
//	go run ./cmd/bench -processes 1,2,3 -pace 2000  # the same, jobs arriving at 2 000/s per process
//	go run ./cmd/bench -processes 2,3 -spread  # the same backlogs, each process on a queue of its own
//	go run ./cmd/bench -citus                  # then the drains on Citus beside plain PostgreSQL (make bench-citus)
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
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
	inFlight      int
	fairness      bool
	fairBacklog   int
	fairTenants   int
	fairPerTenant int
	heapProfile   string
	databaseURL   string
	server        string
	jobs          int
	fiveStepJobs  int
	bulk          int
	latencyRate   int
	latencyFor    time.Duration
	outcomeBatch  int
	maxInFlight   int
	batch         int
	jsonOut       string
	bulkClients   int
	cpuProfile    string
	recvProfile   string
	insertProfile string
	profileFor    time.Duration

	pairs         int
	insertBatch   int
	peer          bool
	only          string
	riverDir      string
	riverCooldown time.Duration
	riverConns    int
	analyze       bool
	keepBulk      bool
	processes     []int
	spread        bool
	pace          float64
	paceFor       time.Duration
	paceBatch     int

	citus            bool
	citusPairs       int
	citusWorkers     int
	citusRoute       string
	citusInsertBatch int
	citusIdle        time.Duration
	// citusSharedJobs and citusShardTransactions size what a shared limit costs on Citus
	// (citus_shared.go).
	citusSharedJobs        int
	citusShardTransactions int
}

// Result is one scenario's figures.
type Result struct {
	Scenario       string             `json:"scenario"`
	Jobs           int                `json:"jobs"`
	Steps          int                `json:"steps"`
	Seconds        float64            `json:"seconds"`
	PerSecond      float64            `json:"per_second"`
	StatementsStep float64            `json:"statements_per_step,omitempty"`
	WALRecordsStep float64            `json:"wal_records_per_step,omitempty"`
	WALBytesStep   float64            `json:"wal_bytes_per_step,omitempty"`
	InsertedStep   float64            `json:"tuples_inserted_per_step,omitempty"`
	UpdatedStep    float64            `json:"tuples_updated_per_step,omitempty"`
	DeletedStep    float64            `json:"tuples_deleted_per_step,omitempty"`
	P50ms          float64            `json:"p50_ms,omitempty"`
	P95ms          float64            `json:"p95_ms,omitempty"`
	P99ms          float64            `json:"p99_ms,omitempty"`
	Statements     map[string]int64   `json:"statements,omitempty"`
	CallSeconds    []float64          `json:"call_seconds,omitempty"`
	RSSMiB         float64            `json:"server_rss_mib,omitempty"`
	Memory         map[string]float64 `json:"server_go_memory_mib,omitempty"`
}

// Comparison is the River side by side: alternating pairs of one-step drains, the
// five-step drain of ours, and bulk inserts of both sides at the same batch size.
type Comparison struct {
	BodyBytes   int64     `json:"step_body_bytes"`
	OursBody    int64     `json:"gendurable_drain_body_bytes,omitempty"`
	RiverBody   int64     `json:"river_drain_body_bytes,omitempty"`
	Concurrency int       `json:"concurrency"`
	Ours        []Drain   `json:"gendurable"`
	River       []Drain   `json:"river"`
	FiveStep    *Drain    `json:"gendurable_five_step,omitempty"`
	InsertBatch int       `json:"insert_batch"`
	OursInsert  []float64 `json:"gendurable_insert_call_seconds"`
	RiverInsert []float64 `json:"river_insert_call_seconds"`
	InsertJobs  int       `json:"insert_jobs_per_side"`
}

func main() {
	if len(os.Args) > 2 && os.Args[1] == "receiver" {
		runReceiver(os.Args[2])
		return
	}
	var o options
	flag.StringVar(&o.databaseURL, "database-url", os.Getenv("BENCH_DATABASE_URL"), "PostgreSQL to use (default: a throwaway cluster)")
	flag.StringVar(&o.server, "server", "", "gendurable server binary (default: built from ./cmd/server)")
	flag.IntVar(&o.jobs, "jobs", 20000, "one-step jobs in each drain of the alternating pairs")
	flag.IntVar(&o.fiveStepJobs, "five-step-jobs", 4000, "five-step jobs to drain")
	flag.IntVar(&o.bulk, "bulk", 100000, "jobs to insert through the batch endpoint (10 000 per request, -bulk-clients clients)")
	flag.IntVar(&o.latencyRate, "latency-rate", 100, "jobs per second for the latency run")
	flag.DurationVar(&o.latencyFor, "latency-for", 5*time.Second, "length of the latency run")
	flag.IntVar(&o.outcomeBatch, "outcome-batch", 256, "GENDURABLE_OUTCOME_BATCH of the server (1 = unbatched)")
	flag.IntVar(&o.maxInFlight, "max-in-flight", 256, "max_in_flight of the drained queues, and the River peer's MaxWorkers")
	flag.IntVar(&o.batch, "batch", 100, "batch of the drained queues")
	flag.StringVar(&o.jsonOut, "json", "", "also write the results to this JSON file")
	flag.IntVar(&o.bulkClients, "bulk-clients", 4, "concurrent clients of the bulk insert")
	flag.StringVar(&o.insertProfile, "insert-cpuprofile", "", "write a CPU profile of the server during the first pair's batch inserts to this file")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the server during the first one-step drain to this file (with -processes: of each server in each drain, to FILE.Np.K)")
	flag.StringVar(&o.recvProfile, "receiver-cpuprofile", "", "write a CPU profile of the webhook receiver during the first one-step drain to this file")
	flag.DurationVar(&o.profileFor, "cpuprofile-for", 5*time.Second, "length of the -cpuprofile capture, from the start of the drain")
	flag.IntVar(&o.pairs, "pairs", 5, "alternating pairs of one-step drains (gendurable, River, gendurable, River...)")
	flag.IntVar(&o.insertBatch, "insert-batch", 5000, "jobs per insert call before each paired drain (POST /v1/jobs/batch, River InsertMany)")
	flag.IntVar(&o.inFlight, "in-flight", 10000, "steps held in flight (the receiver keeps their calls open) while the server's RSS is read; 0 skips")
	flag.StringVar(&o.heapProfile, "heapprofile", "", "write the server's heap profile, taken while the -in-flight steps are held, to this file")
	flag.BoolVar(&o.peer, "peer", true, "run the River peer (bench/river) beside gendurable")
	flag.StringVar(&o.only, "only", "", `run one side only: "gendurable" (as -peer=false) or "river" (the River drains alone)`)
	flag.StringVar(&o.riverDir, "river-dir", "bench/river", "the River peer's module")
	flag.DurationVar(&o.riverCooldown, "river-fetch-cooldown", time.Millisecond, "the River peer's FetchCooldown")
	flag.IntVar(&o.riverConns, "river-max-conns", 20, "the River peer's pool size (the server's GENDURABLE_DB_MAX_CONNS default)")
	flag.BoolVar(&o.analyze, "analyze", true, "VACUUM (ANALYZE) each side's table after its inserts, before its drain")
	flag.BoolVar(&o.keepBulk, "keep-bulk", false, "leave the bulk-inserted jobs runnable in their paused queue (a backlog) instead of cancelling them")
	flag.Func("processes", "run only the scale-out drains: one per count of server processes in this list (e.g. 1,2,3), on the one PostgreSQL", func(v string) error {
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return fmt.Errorf("%q is not a count of processes", f)
			}
			o.processes = append(o.processes, n)
		}
		return nil
	})
	flag.Float64Var(&o.pace, "pace", 0, "with -processes: jobs arrive during each drain through the servers' batch API at this many a second for each process, for -pace-for (0: each drain is a backlog inserted beforehand)")
	flag.BoolVar(&o.spread, "spread", false, "with -processes: each process drains a queue of its own (GENDURABLE_QUEUES), the backlog split evenly among them: "+
		"the claims never meet, the bound of what spreading one queue's claims apart (per-process shards) could give (docs/scaling.md)")
	flag.DurationVar(&o.paceFor, "pace-for", 10*time.Second, "with -pace: how long the jobs arrive")
	flag.IntVar(&o.paceBatch, "pace-batch", 100, "with -pace: jobs per insert call")
	flag.BoolVar(&o.citus, "citus", false, "then start a Citus coordinator and -citus-workers workers on this host and run -citus-pairs alternating pairs "+
		"of one-step drains (plain PostgreSQL, Citus) and a five-step drain of each, with CPU, WAL and statements per node (make bench-citus)")
	flag.IntVar(&o.citusPairs, "citus-pairs", 3, "with -citus: alternating pairs of -jobs one-step drains (plain PostgreSQL, then Citus)")
	flag.IntVar(&o.citusWorkers, "citus-workers", 2, "with -citus: Citus workers")
	flag.StringVar(&o.citusRoute, "citus-route", "auto", "with -citus: the Citus server's GENDURABLE_CITUS_ROUTE (auto and shards: a shard's statements go to its worker, on the shard's own tables; workers: to its worker, on the distributed tables; coordinator: all through the coordinator)")
	flag.DurationVar(&o.citusIdle, "citus-idle", 10*time.Second, "with -citus: a window of this length with one empty queue served on Citus, for what idling costs each node (0 skips)")
	flag.IntVar(&o.citusSharedJobs, "citus-shared-jobs", 10000, "with -citus: jobs in each shared-limit drain (every job names one rate limit, then one gated key; 0 skips)")
	flag.IntVar(&o.citusShardTransactions, "citus-shard-transactions", 2000, "with -citus: write transactions of each kind, on one shard and on two workers (0 skips)")
	flag.IntVar(&o.citusInsertBatch, "citus-insert-batch", 500, "with -citus: jobs per insert call on Citus (each call goes to the server's next shard, so -jobs / this many shards hold a drain)")
	flag.BoolVar(&o.fairness, "fairness", true, "run the fair share part: a tenant's backlog beside other tenants' few jobs, fairness off and on, weights 3:1, and its cost (docs/fairness.md)")
	flag.IntVar(&o.fairBacklog, "fairness-backlog", 100000, "with -fairness: tenant A's backlog")
	flag.IntVar(&o.fairTenants, "fairness-tenants", 10, "with -fairness: the other tenants")
	flag.IntVar(&o.fairPerTenant, "fairness-per-tenant", 100, "with -fairness: each other tenant's jobs")
	flag.Parse()
	if o.citus {
		if why := citusUnavailable(); why != "" {
			fmt.Fprintln(os.Stderr, "bench: -citus:", why)
			os.Exit(2)
		}
		if o.only == "river" || len(o.processes) > 0 { // make bench passes -citus where Citus is installed
			fmt.Fprintln(os.Stderr, "bench: -citus runs after gendurable's plain pairs: left out with -only river and -processes")
			o.citus = false
		}
	}
	if o.spread && (len(o.processes) == 0 || o.pace > 0) {
		fmt.Fprintln(os.Stderr, "bench: -spread splits the backlog of -processes drains (without -pace)")
		os.Exit(2)
	}
	switch o.only {
	case "":
	case "gendurable":
		o.peer = false
	case "river":
		o.peer = true
	default:
		fmt.Fprintln(os.Stderr, `bench: -only takes "gendurable" or "river"`)
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	ctx := context.Background()
	ours := o.only != "river"
	tmp, err := os.MkdirTemp("", "gdbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	riverURL := ""
	if o.databaseURL == "" {
		pgDir, err := os.MkdirTemp("", "gdbench-pg") // its own top directory: the postgres user must reach it
		if err != nil {
			return err
		}
		defer os.RemoveAll(pgDir)
		c, err := pg.StartCluster(ctx, pg.ClusterOptions{Dir: pgDir}) // loads pg_stat_statements when installed
		if err != nil {
			return err
		}
		defer c.Stop()
		for _, name := range []string{"bench", "bench_river"} {
			if err := pg.EnsureDatabase(ctx, c.URL("postgres"), name); err != nil {
				return err
			}
		}
		o.databaseURL, riverURL = c.URL("bench"), c.URL("bench_river")
	} else if o.peer {
		riverURL = riverDatabase(ctx, o.databaseURL)
	}
	// One connection each, so the bench's own backends are known and left out of
	// PostgreSQL's CPU.
	db, err := openProbe(ctx, o.databaseURL)
	if err != nil {
		return err
	}
	defer db.Close()
	ourDB, err := currentDatabase(ctx, db)
	if err != nil {
		return err
	}
	if o.server == "" {
		o.server = filepath.Join(tmp, "gendurable")
		build := exec.Command("go", "build", "-o", o.server, "./cmd/server")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("building the server: %w", err)
		}
	}
	recvAddr, recvPid, stopRecv, err := startReceiver()
	if err != nil {
		return err
	}
	defer stopRecv()
	if len(o.processes) > 0 {
		return runProcesses(ctx, o, db, ourDB, recvAddr, recvPid)
	}
	riverBin := filepath.Join(tmp, "river-peer")
	if o.peer {
		if err := buildRiver(o.riverDir, riverBin); err != nil {
			return err
		}
	}
	apiAddr, pprofAddr := freeAddr(), freeAddr()
	srv, err := startServer(o, apiAddr, pprofAddr)
	if err != nil {
		return err
	}
	defer stopServer(srv)
	api := "http://" + apiAddr
	if err := waitReady(api); err != nil {
		return err
	}
	if err := putHandler(api, recvAddr); err != nil {
		return err
	}
	bodyBytes, err := stepBodySize(api, recvAddr)
	if err != nil {
		return err
	}

	var riverDB *pg.DB
	var peer *riverPeer
	if o.peer {
		if peer, err = startRiver(riverBin, "-database-url", riverURL, "-url", "http://"+recvAddr+"/steps",
			"-secret", benchSecret, "-body-bytes", strconv.FormatInt(bodyBytes, 10), "-workers", strconv.Itoa(o.maxInFlight),
			"-max-conns", strconv.Itoa(o.riverConns), "-insert-batch", strconv.Itoa(o.insertBatch),
			"-fetch-cooldown", o.riverCooldown.String()); err != nil {
			return err
		}
		defer peer.stop()
		if riverDB, err = openProbe(ctx, riverURL); err != nil {
			return err
		}
		defer riverDB.Close()
	}
	probes := []*pg.DB{}
	if riverDB != nil {
		probes = append(probes, riverDB)
	}
	m, err := newMeter(ctx, db, recvPid, probes...)
	if err != nil {
		return err
	}
	var results []Result
	cmp := Comparison{BodyBytes: bodyBytes, Concurrency: o.maxInFlight, InsertBatch: o.insertBatch}

	if ours {
		// Bulk insert, into a paused queue that is never drained.
		if err := call(api, "PUT", "/v1/queues/bulk", `{"paused": true}`); err != nil {
			return err
		}
		bulk, err := bulkInsert(api, "bench", "bulk", o.bulk, 1, o.bulkClients, 10000)
		if err != nil {
			return err
		}
		results = append(results, bulk)
		if !o.keepBulk {
			// Finished rows, as before the River pairs existed: a runnable backlog in a
			// paused queue slows JobReadyExists (a generic plan that seq-scans jobs) and
			// with it insert→webhook latency; -keep-bulk measures that.
			if _, err := db.Exec(ctx, `-- probe
				UPDATE jobs SET status = 'cancelled', finished_at = now() WHERE queue = 'bulk' AND status = 'runnable'`); err != nil {
				return err
			}
		}
	}

	// Alternating pairs of one-step drains: gendurable, River, gendurable, River...
	oursSide := func(queue string, profile bool) side {
		return side{name: "gendurable", pids: []int{srv.Process.Pid}, database: ourDB,
			start: func() error {
				if profile && o.cpuProfile != "" {
					go func() {
						if err := captureProfile(pprofAddr, o.cpuProfile, o.profileFor); err != nil {
							fmt.Fprintln(os.Stderr, "bench: cpu profile:", err)
						}
					}()
				}
				if profile && o.recvProfile != "" {
					go func() {
						if err := captureProfile(recvAddr, o.recvProfile, o.profileFor); err != nil {
							fmt.Fprintln(os.Stderr, "bench: receiver cpu profile:", err)
						}
					}()
				}
				return resumeQueue(api, queue)
			},
			finished: func(ctx context.Context) (bool, error) {
				n, err := db.QueryInt(ctx, `-- probe
					SELECT (EXISTS (SELECT 1 FROM jobs WHERE queue = $1 AND status = 'runnable')
					     OR EXISTS (SELECT 1 FROM jobs WHERE status = 'executing' AND queue = $1))::int`, queue)
				return n == 0, err
			}}
	}
	riverSide := side{name: "River", database: "", start: func() error { _, err := peer.do("resume"); return err },
		finished: func(ctx context.Context) (bool, error) {
			n, err := riverDB.QueryInt(ctx, `-- probe
				SELECT (EXISTS (SELECT 1 FROM river_job WHERE state = 'available' AND queue = 'bench')
				     OR EXISTS (SELECT 1 FROM river_job WHERE state = 'running' AND queue = 'bench'))::int`)
			return n == 0, err
		},
		stop: func() error { _, err := peer.do("pause"); return err }}
	if peer != nil {
		riverSide.pids = []int{peer.cmd.Process.Pid}
		if riverSide.database, err = currentDatabase(ctx, riverDB); err != nil {
			return err
		}
	}
	for pair := 1; pair <= o.pairs; pair++ {
		queue := fmt.Sprintf("drain1-%d", pair)
		if ours {
			if err := call(api, "PUT", "/v1/queues/"+queue, fmt.Sprintf(`{"paused": true, "max_in_flight": %d, "batch": %d}`, o.maxInFlight, o.batch)); err != nil {
				return err
			}
		}
		var profiled chan error
		if ours && pair == 1 && o.insertProfile != "" {
			profiled = make(chan error, 1)
			go func() { profiled <- captureProfile(pprofAddr, o.insertProfile, o.profileFor) }()
		}
		// The pair's jobs go in one call a side at a time, alternating (ours, River's,
		// ours...): the two sides' calls of a pair meet the same moment of a shared machine.
		for done := 0; done < o.jobs; done += o.insertBatch {
			k := min(o.insertBatch, o.jobs-done)
			if ours {
				ins, err := bulkInsert(api, "bench", queue, k, 1, 1, o.insertBatch)
				if err != nil {
					return err
				}
				cmp.OursInsert = append(cmp.OursInsert, ins.CallSeconds...)
			}
			if peer != nil {
				calls, err := peer.insert(k)
				if err != nil {
					return err
				}
				cmp.RiverInsert = append(cmp.RiverInsert, calls...)
			}
		}
		cmp.InsertJobs = pair * o.jobs
		if peer != nil && ours {
			// River's table is vacuumed now as well as before its own drain: its new rows
			// would otherwise draw autovacuum to it during ours.
			if err := vacuumAnalyze(ctx, o, riverDB, "river_job"); err != nil {
				return err
			}
		}
		if profiled != nil {
			if err := <-profiled; err != nil {
				fmt.Fprintln(os.Stderr, "bench: insert profile:", err)
			}
		}
		if ours {
			if err := vacuumAnalyze(ctx, o, db, "jobs"); err != nil {
				return err
			}
			r, d, err := drainOurs(ctx, m, db, oursSide(queue, pair == 1 && (o.cpuProfile != "" || o.recvProfile != "")), queue, pair, o.jobs, 1)
			if err != nil {
				return err
			}
			results = append(results, r)
			cmp.Ours = append(cmp.Ours, d)
			if st, err := receiverStats(recvAddr); err == nil {
				cmp.OursBody = st["last_body_bytes"] // the last step of our drain
			}
			if peer != nil {
				// Our drain's dead row versions would draw autovacuum to jobs during River's.
				if err := vacuumAnalyze(ctx, o, db, "jobs"); err != nil {
					return err
				}
			}
		}
		if peer != nil {
			completed := func() (int64, error) {
				return riverDB.QueryInt(ctx, `-- probe
					SELECT count(*) FROM river_job WHERE queue = 'bench' AND state = 'completed'`)
			}
			if err := vacuumAnalyze(ctx, o, riverDB, "river_job"); err != nil {
				return err
			}
			c0, err := completed()
			if err != nil {
				return err
			}
			time.Sleep(statsSettle) // the same quiet start as ours
			d, err := m.drain(ctx, riverSide, pair, o.jobs, 1)
			if err != nil {
				return err
			}
			if c1, err := completed(); err != nil {
				return err
			} else if c1-c0 != int64(o.jobs) {
				return fmt.Errorf("the River drain %d: %d of %d jobs completed", pair, c1-c0, o.jobs)
			}
			cmp.River = append(cmp.River, d)
			// The River drain ran last: the receiver's last body is one of River's.
			if st, err := receiverStats(recvAddr); err == nil {
				cmp.RiverBody = st["last_body_bytes"]
			}
		}
	}
	if ours {
		if o.fiveStepJobs > 0 {
			r, d, err := fiveStepDrain(ctx, o, m, db, api, oursSide("drain5", false))
			if err != nil {
				return err
			}
			results = append(results, r)
			cmp.FiveStep = &d
		}
		lat, err := latency(api, recvAddr, o.latencyRate, o.latencyFor)
		if err != nil {
			return err
		}
		results = append(results, lat)
		if o.inFlight > 0 {
			held, err := holdInFlight(ctx, db, api, recvAddr, pprofAddr, o.heapProfile, srv.Process.Pid, o.inFlight)
			if err != nil {
				return err
			}
			results = append(results, held)
		}
	}

	var fairness *FairnessReport
	if ours && o.fairness {
		began := time.Now()
		if fairness, err = runFairness(ctx, o, db, api); err != nil {
			return fmt.Errorf("fairness: %w", err)
		}
		fmt.Fprintf(os.Stderr, "bench: the fairness part took %s\n", time.Since(began).Round(time.Second))
	}

	var citus *CitusReport
	var citusErr error
	if ours && o.citus {
		began := time.Now()
		citus, citusErr = runCitus(ctx, o, plainNodesSide(m, db, ourDB, api, srv.Process.Pid, recvAddr))
		fmt.Fprintf(os.Stderr, "bench: the Citus part took %s\n", time.Since(began).Round(time.Second))
	}

	rss := peakRSS(srv.Process.Pid)
	if ours {
		print(results, o, rss)
	}
	printComparison(os.Stdout, cmp, o)
	if fairness != nil {
		printFairness(os.Stdout, fairness, "")
	}
	if citus != nil {
		printCitus(os.Stdout, citus, cmp, o)
	}
	if o.jsonOut != "" {
		out := map[string]any{"outcome_batch": o.outcomeBatch, "server_peak_rss_kb": rss, "results": results,
			"river_side_by_side": cmp}
		if citus != nil {
			out["citus"] = citus
		}
		if fairness != nil {
			out["fairness"] = fairness
		}
		b, _ := json.MarshalIndent(out, "", "  ")
		if err := os.WriteFile(o.jsonOut, b, 0o644); err != nil {
			return err
		}
	}
	if citusErr != nil {
		return fmt.Errorf("citus: %w", citusErr)
	}
	return nil
}

// fiveStepDrain inserts -five-step-jobs five-step jobs into a paused queue and drains them
// as side s (the caller skips it at -five-step-jobs 0).
func fiveStepDrain(ctx context.Context, o options, m *meter, db *pg.DB, api string, s side) (Result, Drain, error) {
	if err := call(api, "PUT", "/v1/queues/drain5", fmt.Sprintf(`{"paused": true, "max_in_flight": %d, "batch": %d}`, o.maxInFlight, o.batch)); err != nil {
		return Result{}, Drain{}, err
	}
	if _, err := bulkInsert(api, "bench", "drain5", o.fiveStepJobs, 5, 1, 10000); err != nil {
		return Result{}, Drain{}, err
	}
	if err := vacuumAnalyze(ctx, o, db, "jobs"); err != nil {
		return Result{}, Drain{}, err
	}
	return drainOurs(ctx, m, db, s, "drain5", 0, o.fiveStepJobs, 5)
}

// startServer starts one server process on the bench's database, serving its API on
// apiAddr and pprof on pprofAddr.
func startServer(o options, apiAddr, pprofAddr string, env ...string) (*exec.Cmd, error) {
	srv := exec.Command(o.server)
	srv.Env = append(os.Environ(), "DATABASE_URL="+o.databaseURL, "GENDURABLE_ADDR="+apiAddr, "GENDURABLE_PPROF_ADDR="+pprofAddr,
		"GENDURABLE_ALLOW_PRIVATE_WEBHOOKS=true", "GENDURABLE_LOG_LEVEL=warn",
		"GENDURABLE_OUTCOME_BATCH="+strconv.Itoa(o.outcomeBatch))
	srv.Env = append(srv.Env, env...)
	srv.Stderr = os.Stderr
	return srv, srv.Start()
}

// stopServer stops a server process as an operator would (SIGTERM) and waits for it.
func stopServer(srv *exec.Cmd) {
	_ = srv.Process.Signal(syscall.SIGTERM)
	_ = srv.Wait()
}

// putHandler registers the bench handler: the receiver's /steps.
func putHandler(api, recvAddr string) error {
	return call(api, "PUT", "/v1/handlers/bench", fmt.Sprintf(`{"url": "http://%s/steps", "secret": %q}`, recvAddr, benchSecret))
}

// openProbe opens the bench's own connection to a database: one, so its backend is
// known (and left out of PostgreSQL's CPU), and with sequential scans off, so the polls
// of a drain stay index probes whatever the table statistics say (a generic plan that
// expects a match at once may otherwise scan the whole table for a row that is not there).
func openProbe(ctx context.Context, databaseURL string) (*pg.DB, error) {
	db, err := pg.Open(ctx, databaseURL, pg.Options{MaxConns: 1})
	if err != nil {
		return nil, err
	}
	if _, err := db.Exec(ctx, `SET enable_seqscan = off`); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// vacuumAnalyze vacuums a table and refreshes its statistics after a side's insert, as
// autovacuum would within a minute (-analyze=false leaves it to autovacuum). The
// statistics also drop the cached plans built on the table: without them the server's
// generic plans, built when the table was empty, keep seq-scanning the jobs table until
// autovacuum runs (measured: the pick's UPDATE took ~50 ms a batch right after the
// first bulk insert). The vacuum takes the previous drains' dead rows and the insert's
// new pages out of the next drain: left to autovacuum, a vacuum of the table (2 updates
// a step, 20 000 rows inserted before each drain) started at a random moment, often
// inside one side's drain of 1.2–2 s, and its CPU went to that drain.
func vacuumAnalyze(ctx context.Context, o options, db *pg.DB, table string) error {
	if !o.analyze {
		return nil
	}
	_, err := db.Exec(ctx, "-- probe\n\t\tVACUUM (ANALYZE) "+table)
	return err
}

func currentDatabase(ctx context.Context, db *pg.DB) (string, error) {
	rows, err := db.QueryStrings(ctx, `-- probe
		SELECT current_database()`)
	if err != nil {
		return "", err
	}
	return rows[0][0], nil
}

// riverDatabase is where the River peer keeps its tables when the bench was given a
// database: a database beside it on the same server (<name>_river), or the same
// database when that cannot be created (River's tables are river_*, apart from ours).
func riverDatabase(ctx context.Context, databaseURL string) string {
	u, err := url.Parse(databaseURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || strings.Trim(u.Path, "/") == "" {
		return databaseURL
	}
	name := strings.Trim(u.Path, "/") + "_river"
	if err := pg.EnsureDatabase(ctx, databaseURL, name); err != nil {
		fmt.Fprintf(os.Stderr, "bench: cannot create database %s (%v); River shares the bench's database\n", name, err)
		return databaseURL
	}
	u.Path = "/" + name
	return u.String()
}

// receiverStats answers the receiver's counters: steps served and the last body's size.
func receiverStats(recvAddr string) (map[string]int64, error) {
	b, err := callBody("http://"+recvAddr, "GET", "/stats", "")
	if err != nil {
		return nil, err
	}
	var s map[string]int64
	return s, json.Unmarshal(b, &s)
}

// stepBodySize runs one one-step job and answers the size of the step body the
// receiver got: the River peer sends bodies of that size.
func stepBodySize(api, recvAddr string) (int64, error) {
	if err := call(api, "PUT", "/v1/queues/probe", `{"max_in_flight": 1, "batch": 1}`); err != nil {
		return 0, err
	}
	before, err := receiverStats(recvAddr)
	if err != nil {
		return 0, err
	}
	if err := call(api, "POST", "/v1/jobs", `{"handler":"bench","queue":"probe","input":{"steps":1}}`); err != nil {
		return 0, err
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		s, err := receiverStats(recvAddr)
		if err != nil {
			return 0, err
		}
		if s["requests"] > before["requests"] {
			return s["last_body_bytes"], nil
		}
	}
	return 0, fmt.Errorf("the probe job's step never reached the receiver")
}

// startReceiver starts the webhook receiver in its own process (this binary, "receiver")
// and answers its address and pid.
func startReceiver() (string, int, func(), error) {
	cmd := exec.Command(os.Args[0], "receiver", "127.0.0.1:0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", 0, nil, err
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		return "", 0, nil, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return "", 0, nil, fmt.Errorf("receiver did not start: %w", err)
	}
	return strings.TrimSpace(line), cmd.Process.Pid, func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }, nil
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

// resumeQueue unpauses a drain's queue with Prefer: return=minimal: the queue's answer
// would count every job of the table (docs/performance.md, known limits) inside the
// drain's window, where River's resume counts nothing.
func resumeQueue(api, queue string) error {
	_, err := request(api, "PUT", "/v1/queues/"+queue, `{"paused": false}`, "return=minimal")
	return err
}

func callBody(api, method, path, body string) ([]byte, error) {
	return request(api, method, path, body, "")
}

// request makes one API call (prefer, when set, is its Prefer header) and answers the body.
func request(api, method, path, body, prefer string) ([]byte, error) {
	req, _ := http.NewRequest(method, api+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if prefer != "" {
		req.Header.Set("Prefer", prefer)
	}
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

// bulkInsert inserts n jobs through POST /v1/jobs/batch, per jobs per request, from
// `clients` concurrent clients (a bulk loader's usual shape), and times each request.
func bulkInsert(api, handler, queue string, n, steps, clients, per int) (Result, error) {
	return bulkInsertWith(api, handler, queue, n, steps, clients, per, "")
}

// bulkInsertWith is bulkInsert with extra fields in every job (a JSON object's members,
// from its first comma: `,"rate_limit":{"name":"x"}`); "{n}" in extra is the job's number
// in the run (`,"concurrency_key":"c{n}"`: a key per job).
func bulkInsertWith(api, handler, queue string, n, steps, clients, per int, extra string) (Result, error) {
	numbered := strings.Contains(extra, "{n}")
	made := 0
	body := func(k int) string {
		var b bytes.Buffer
		b.WriteString(`{"jobs":[`)
		for i := range k {
			if i > 0 {
				b.WriteByte(',')
			}
			e := extra
			if numbered {
				e = strings.ReplaceAll(extra, "{n}", strconv.Itoa(made))
				made++
			}
			fmt.Fprintf(&b, `{"handler":%q,"queue":%q,"input":{"steps":%d}%s}`, handler, queue, steps, e)
		}
		b.WriteString(`]}`)
		return b.String()
	}
	full := body(per)
	requests := make(chan string, n/per+1)
	for done := 0; done < n; done += per {
		if k := min(per, n-done); k == per && !numbered {
			requests <- full
		} else {
			requests <- body(k)
		}
	}
	close(requests)
	started := time.Now()
	type answer struct {
		secs []float64
		err  error
	}
	answers := make(chan answer, clients)
	for range clients {
		go func() {
			var a answer
			for body := range requests {
				t := time.Now()
				if a.err = call(api, "POST", "/v1/jobs/batch", body); a.err != nil {
					break
				}
				a.secs = append(a.secs, time.Since(t).Seconds())
			}
			answers <- a
		}()
	}
	var calls []float64
	for range clients {
		a := <-answers
		if a.err != nil {
			return Result{}, a.err
		}
		calls = append(calls, a.secs...)
	}
	secs := time.Since(started).Seconds()
	return Result{Scenario: fmt.Sprintf("bulk insert (POST /v1/jobs/batch, %d per request, %d clients)", per, clients),
		Jobs: n, Seconds: secs, PerSecond: float64(n) / secs, CallSeconds: calls}, nil
}

// counters is a snapshot of the rows the database wrote, from its table statistics.
type counters struct {
	inserted, updated, deleted int64
}

func snapshot(ctx context.Context, db *pg.DB) (counters, error) {
	var c counters
	rows, err := db.QueryStrings(ctx, `-- probe
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
// when idle, at most every 10 seconds. Every drain, River's too, starts after it.
const statsSettle = 11 * time.Second

// drainOurs drains one paused queue of gendurable's and answers its row in the scenario
// table (statements and WAL from pg_stat_statements over the drain, tuples from the
// table statistics) and its measured drain.
func drainOurs(ctx context.Context, m *meter, db *pg.DB, s side, queue string, pair, jobs, steps int) (Result, Drain, error) {
	time.Sleep(statsSettle)
	before, err := snapshot(ctx, db)
	if err != nil {
		return Result{}, Drain{}, err
	}
	d, err := m.drain(ctx, s, pair, jobs, steps)
	if err != nil {
		return Result{}, Drain{}, err
	}
	if n, err := db.QueryInt(ctx, `-- probe
		SELECT count(*) FROM jobs WHERE queue = $1 AND status = 'done'`, queue); err != nil {
		return Result{}, Drain{}, err
	} else if n != int64(jobs) {
		return Result{}, Drain{}, fmt.Errorf("%s: %d of %d jobs done", queue, n, jobs)
	}
	time.Sleep(statsSettle)
	after, err := snapshot(ctx, db)
	if err != nil {
		return Result{}, Drain{}, err
	}
	total := float64(jobs * steps)
	name := fmt.Sprintf("drain of %d %d-step jobs", jobs, steps)
	if pair > 0 {
		name += fmt.Sprintf(" (pair %d)", pair)
	}
	r := Result{Scenario: name, Jobs: jobs, Steps: jobs * steps, Seconds: d.Seconds, PerSecond: d.PerSecond,
		Statements: map[string]int64{}, StatementsStep: d.StatementsStep, WALBytesStep: d.WALBytesStep}
	var stmts, walRecords int64
	for _, st := range d.Statements {
		walRecords += st.WALRecords
		if st.Calls > 0 && st.Name != "QueueUpsert" && st.Name != "QueueCounts" && !strings.HasPrefix(st.Name, "Handler") {
			r.Statements[st.Name] = st.Calls
			stmts += st.Calls
		}
	}
	r.StatementsStep = float64(stmts) / total
	r.WALRecordsStep = float64(walRecords) / total
	r.InsertedStep = float64(after.inserted-before.inserted) / total
	r.UpdatedStep = float64(after.updated-before.updated) / total
	r.DeletedStep = float64(after.deleted-before.deleted) / total
	return r, d, nil
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

// holdInFlight inserts n one-step jobs whose calls the receiver keeps open, reads the
// server's resident set once all n are in flight, then lets them finish.
func holdInFlight(ctx context.Context, db *pg.DB, api, recvAddr, pprofAddr, heapProfile string, pid, n int) (Result, error) {
	if err := call(api, "PUT", "/v1/handlers/bench-hold", fmt.Sprintf(`{"url": "http://%s/hold", "secret": %q, "timeout": "2m"}`,
		recvAddr, benchSecret)); err != nil {
		return Result{}, err
	}
	if err := call(api, "PUT", "/v1/queues/held", fmt.Sprintf(`{"max_in_flight": %d, "batch": 1000}`, n)); err != nil {
		return Result{}, err
	}
	started := time.Now()
	if _, err := bulkInsert(api, "bench-hold", "held", n, 1, 1, 5000); err != nil {
		return Result{}, err
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		st, err := receiverStats(recvAddr)
		if err != nil {
			return Result{}, err
		}
		if st["held"] >= int64(n) {
			break
		}
		if time.Now().After(deadline) {
			return Result{}, fmt.Errorf("only %d of %d steps reached the receiver in 2 minutes", st["held"], n)
		}
	}
	secs := time.Since(started).Seconds()
	rss := currentRSS(pid)
	mem := memStats(pprofAddr)
	if heapProfile != "" {
		if b, err := callBody("http://"+pprofAddr, "GET", "/debug/pprof/heap", ""); err == nil {
			_ = os.WriteFile(heapProfile, b, 0o644)
		}
	}
	if err := call("http://"+recvAddr, "POST", "/release", ""); err != nil {
		return Result{}, err
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		left, err := db.QueryInt(ctx, `-- probe
			SELECT count(*) FROM jobs WHERE queue = 'held' AND status NOT IN ('done', 'failed', 'cancelled')`)
		if err != nil {
			return Result{}, err
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			return Result{}, fmt.Errorf("%d held jobs did not finish within 2 minutes of their release", left)
		}
	}
	return Result{Scenario: fmt.Sprintf("%d steps in flight (calls held open)", n), Jobs: n, Seconds: secs,
		PerSecond: float64(n) / secs, RSSMiB: float64(rss) / 1024, Memory: mem}, nil
}

// memStats reads the Go runtime's memory figures (MiB) from the server's heap profile,
// and its goroutine count.
func memStats(pprofAddr string) map[string]float64 {
	b, err := callBody("http://"+pprofAddr, "GET", "/debug/pprof/heap?debug=1", "")
	if err != nil {
		return nil
	}
	out := map[string]float64{}
	if g, err := callBody("http://"+pprofAddr, "GET", "/debug/pprof/goroutine?debug=1", ""); err == nil {
		if v, ok := strings.CutPrefix(strings.SplitN(string(g), "\n", 2)[0], "goroutine profile: total "); ok {
			out["goroutines"], _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	for _, line := range strings.Split(string(b), "\n") {
		for _, name := range []string{"HeapInuse", "Stack", "HeapSys", "Sys", "NumGC"} {
			if v, ok := strings.CutPrefix(line, "# "+name+" = "); ok {
				n, _ := strconv.ParseFloat(strings.Fields(v)[0], 64)
				if name != "NumGC" {
					n /= 1 << 20
				}
				out[name] = math.Round(n*10) / 10
			}
		}
	}
	return out
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
func peakRSS(pid int) int64 { return procStatus(pid, "VmHWM:") }

// currentRSS reads the process's resident set (kB) from /proc.
func currentRSS(pid int) int64 { return procStatus(pid, "VmRSS:") }

func procStatus(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, field) {
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
		if r.RSSMiB > 0 {
			fmt.Printf("server RSS with %s: %.1f MiB (Go runtime, MiB: %v)\n", r.Scenario, r.RSSMiB, r.Memory)
		}
	}
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
