package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
)

// The -citus mode (docs/citus.md, "Measured"): after the plain PostgreSQL pairs, the bench
// starts a Citus coordinator and -citus-workers workers on this host, a second server
// process on a database there, and runs -citus-pairs alternating pairs of one-step
// drains (plain PostgreSQL on the bench's first server, then Citus), then a five-step
// drain of each. For each drain and each database node it reads, over the drain window:
// the CPU of the node's postmaster and all its children (/proc, the bench's own
// backends left out), its WAL (pg_current_wal_lsn before and after), and its statements
// (pg_stat_statements, reset before the drain).

// citusDatabase is the database the bench makes on the Citus cluster.
const citusDatabase = "bench_citus"

// NodeCost is one database node's share of one drain, per step.
type NodeCost struct {
	Node string `json:"node"`
	// CPUMicros is the utime+stime of the node's postmaster and every child of it
	// (backends, the Citus maintenance daemon, WAL writer...), the bench's probes left out.
	CPUMicros float64 `json:"cpu_us_per_step"`
	// WALBytes is pg_wal_lsn_diff of pg_current_wal_lsn() after and before the drain:
	// everything the node wrote to its WAL.
	WALBytes float64 `json:"wal_bytes_per_step"`
	// StatementWALBytes is the WAL pg_stat_statements attributes to statements.
	StatementWALBytes float64 `json:"statement_wal_bytes_per_step"`
	// Statements counts the statements the node ran (pg_stat_statements calls, the
	// bench's own, the queue's resume and BEGIN and COMMIT left out).
	Statements float64 `json:"statements_per_step"`
	// RoundTrips counts the requests that reached the node (roundTrips).
	RoundTrips     float64         `json:"round_trips_per_step"`
	ExecMicros     float64         `json:"exec_us_per_step"`
	PlanMicros     float64         `json:"plan_us_per_step"`
	StatementStats []StatementStat `json:"statements"`
}

// NodesDrain is one drain of the -citus mode, plain PostgreSQL's or Citus's.
type NodesDrain struct {
	Side      string  `json:"side"`
	Pair      int     `json:"pair,omitempty"`
	Jobs      int     `json:"jobs"`
	Steps     int     `json:"steps"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"per_second"`
	// ServerMicros and ReceiverMicros are the CPU a step of the server and the receiver.
	ServerMicros   float64    `json:"server_cpu_us_per_step"`
	ReceiverMicros float64    `json:"receiver_cpu_us_per_step"`
	Nodes          []NodeCost `json:"nodes"`
	// JobsByNode (Citus) is where the drained jobs lived: jobs by worker, and Shards the
	// count of shards that held them.
	JobsByNode map[string]int64 `json:"jobs_by_node,omitempty"`
	Shards     int              `json:"shards,omitempty"`
}

// CitusReport is the -citus mode's result.
type CitusReport struct {
	Workers     int          `json:"workers"`
	Version     string       `json:"citus_version"`
	ShardCount  int          `json:"shard_count"`
	InsertBatch int          `json:"citus_insert_batch"`
	Plain       []NodesDrain `json:"postgresql"`
	Citus       []NodesDrain `json:"citus"`
	Plain5      *NodesDrain  `json:"postgresql_five_step,omitempty"`
	Citus5      *NodesDrain  `json:"citus_five_step,omitempty"`
	// Paused and Idle are -citus-idle windows of the Citus side: every queue paused (the
	// reaper's sweeps and Citus's own daemons), then one empty queue served.
	Paused *IdleCost `json:"citus_paused,omitempty"`
	Idle   *IdleCost `json:"citus_idle,omitempty"`
	// Fairness is the fair share part (-fairness) run on the Citus side: each tenant's
	// jobs on its fairness key's shard (docs/citus.md, "Fair share").
	Fairness *FairnessReport `json:"fairness,omitempty"`
	// Shared are the shared-limit drains (-citus-shared-jobs), and ShardTransactions the
	// writes on one shard and on two workers (-citus-shard-transactions): citus_shared.go.
	Shared            []SharedLimitDrains    `json:"shared_limits,omitempty"`
	ShardTransactions []ShardTransactionCost `json:"shard_transactions,omitempty"`
}

// IdleCost is what the Citus side costs with nothing to run, per second of a -citus-idle
// window: the reaper's sweeps (every shard), Citus's maintenance daemons, and with a
// queue served its feeder's empty claims (every shard, about once a second at the
// poll's backoff).
type IdleCost struct {
	Seconds      float64    `json:"seconds"`
	ServerMicros float64    `json:"server_cpu_us_per_second"`
	Nodes        []IdleNode `json:"nodes"`
}

// IdleNode is one database node's share of an IdleCost, per second.
type IdleNode struct {
	Node       string          `json:"node"`
	CPUMicros  float64         `json:"cpu_us_per_second"`
	WALBytes   float64         `json:"wal_bytes_per_second"`
	Statements float64         `json:"statements_per_second"`
	RoundTrips float64         `json:"round_trips_per_second"`
	Stats      []StatementStat `json:"statements"`
}

// dbNode is a database node the bench measures: its own probe connection (one, so its
// backend is known and left out of the node's CPU) and its postmaster.
type dbNode struct {
	name       string
	db         *pg.DB
	database   string
	postmaster int
}

// nodesSide is the system under test of a -citus mode drain: a server process and the
// database nodes behind it.
type nodesSide struct {
	name     string
	api      string
	server   int
	nodes    []*dbNode
	citus    bool
	recvAddr string
	receiver int
}

// runCitus runs the -citus mode. plain is the bench's first server (api, pid) on the
// plain PostgreSQL (probe db, database, postmaster).
func runCitus(ctx context.Context, o options, plain nodesSide) (*CitusReport, error) {
	dir, err := os.MkdirTemp("", "gdbench-citus") // its own top directory: the postgres user must reach it
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// The nodes' folders go inside it: as root, PostgreSQL runs as postgres, which must
	// pass through to them (else each node is placed under postgres's home, which
	// RemoveAll would not reach).
	if err := os.Chmod(dir, 0o711); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "bench: starting a Citus coordinator and %d workers\n", o.citusWorkers)
	c, err := pg.StartCitusCluster(ctx, pg.CitusClusterOptions{Dir: dir, Workers: o.citusWorkers})
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	if err := c.CreateDatabase(ctx, citusDatabase); err != nil {
		return nil, err
	}
	cs := nodesSide{name: "Citus", citus: true, recvAddr: plain.recvAddr, receiver: plain.receiver}
	for i, n := range c.Nodes {
		name := "coordinator"
		if i > 0 {
			name = "worker " + strconv.Itoa(i)
		}
		// pg_stat_statements is made on the coordinator, which propagates it to the
		// workers (Citus refuses CREATE EXTENSION on a worker).
		node, err := openNode(ctx, name, n.TCPURL(citusDatabase), i == 0)
		if err != nil {
			return nil, err
		}
		defer node.db.Close()
		cs.nodes = append(cs.nodes, node)
	}
	co := o
	co.databaseURL = c.URL(citusDatabase)
	apiAddr, pprofAddr := freeAddr(), freeAddr()
	srv, err := startServer(co, apiAddr, pprofAddr, "GENDURABLE_CITUS_ROUTE="+o.citusRoute) // migrates: distributes the tables
	if err != nil {
		return nil, err
	}
	defer stopServer(srv)
	cs.api, cs.server = "http://"+apiAddr, srv.Process.Pid
	if err := waitReady(cs.api); err != nil {
		return nil, err
	}
	if err := putHandler(cs.api, plain.recvAddr); err != nil {
		return nil, err
	}
	rep := &CitusReport{Workers: o.citusWorkers, InsertBatch: o.citusInsertBatch}
	coord := cs.nodes[0].db
	if v, err := coord.QueryStrings(ctx, `-- probe
		SELECT extversion FROM pg_extension WHERE extname = 'citus'`); err == nil && len(v) > 0 {
		rep.Version = v[0][0]
	}
	if n, err := coord.QueryInt(ctx, `-- probe
		SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'jobs'::regclass`); err == nil {
		rep.ShardCount = int(n)
	}

	// One drain first, not measured: the plain server is warm from the pairs beside River,
	// and a new backend on a Citus node loads Citus's metadata at its first statements
	// (~6 ms each, measured), which the Citus server's new connections would otherwise
	// put on its first drain (0.15-0.51x in the first pair of three runs, against
	// 0.46-0.68x in the others).
	if _, err := nodesDrain(ctx, o, cs, "citus-warmup", 0, o.jobs, 1, o.citusInsertBatch); err != nil {
		return rep, fmt.Errorf("the Citus warm-up drain: %w", err)
	}
	for pair := 1; pair <= o.citusPairs; pair++ {
		d, err := nodesDrain(ctx, o, plain, fmt.Sprintf("postgresql-%d", pair), pair, o.jobs, 1, o.insertBatch)
		if err != nil {
			return rep, fmt.Errorf("the PostgreSQL drain %d: %w", pair, err)
		}
		rep.Plain = append(rep.Plain, d)
		if d, err = nodesDrain(ctx, o, cs, fmt.Sprintf("citus-%d", pair), pair, o.jobs, 1, o.citusInsertBatch); err != nil {
			return rep, fmt.Errorf("the Citus drain %d: %w", pair, err)
		}
		rep.Citus = append(rep.Citus, d)
	}
	if o.fiveStepJobs > 0 {
		p5, err := nodesDrain(ctx, o, plain, "postgresql-five-step", 0, o.fiveStepJobs, 5, 10000)
		if err != nil {
			return rep, fmt.Errorf("the PostgreSQL five-step drain: %w", err)
		}
		rep.Plain5 = &p5
		c5, err := nodesDrain(ctx, o, cs, "citus-five-step", 0, o.fiveStepJobs, 5, o.citusInsertBatch)
		if err != nil {
			return rep, fmt.Errorf("the Citus five-step drain: %w", err)
		}
		rep.Citus5 = &c5
	}
	if o.citusSharedJobs > 0 {
		if rep.Shared, err = sharedLimits(ctx, o, plain, cs, o.citusSharedJobs); err != nil {
			return rep, fmt.Errorf("the shared-limit drains: %w", err)
		}
	}
	if o.citusShardTransactions > 0 {
		if rep.ShardTransactions, err = shardTransactions(ctx, cs, c.URL(citusDatabase), o.citusShardTransactions); err != nil {
			return rep, fmt.Errorf("the two-shard transactions: %w", err)
		}
	}
	if o.fairness {
		if rep.Fairness, err = runFairness(ctx, o, coord, cs.api); err != nil {
			return rep, fmt.Errorf("the fair share part on Citus: %w", err)
		}
	}
	if o.citusIdle > 0 {
		if rep.Paused, err = idleCost(ctx, cs, "", o.citusIdle); err != nil {
			return rep, fmt.Errorf("the Citus idle window: %w", err)
		}
		if rep.Idle, err = idleCost(ctx, cs, "citus-1", o.citusIdle); err != nil {
			return rep, fmt.Errorf("the Citus idle window: %w", err)
		}
	}
	return rep, nil
}

// idleCost resumes one drained (empty) queue of side s (none when queue is ""), lets its
// feeder back off to its slowest poll, and measures a window of d: CPU, WAL and
// statements a second by node.
func idleCost(ctx context.Context, s nodesSide, queue string, d time.Duration) (*IdleCost, error) {
	if queue != "" {
		if err := resumeQueue(s.api, queue); err != nil {
			return nil, err
		}
		defer call(s.api, "PUT", "/v1/queues/"+queue, `{"paused": true}`) //nolint:errcheck // the last measurement
	}
	// The poll's backoff: 50 ms doubling to 1 s.
	time.Sleep(3 * time.Second)
	excl := make([]map[int]bool, len(s.nodes))
	lsn0 := make([]string, len(s.nodes))
	for i, n := range s.nodes {
		if _, err := n.db.Exec(ctx, `-- probe
			SELECT pg_stat_statements_reset()`); err != nil {
			return nil, err
		}
		excl[i] = probeBackends(ctx, n.db)
		var err error
		if lsn0[i], err = currentLSN(ctx, n.db); err != nil {
			return nil, err
		}
	}
	cpu0 := nodesCPU(s, excl)
	started := time.Now()
	time.Sleep(d)
	cpu1 := nodesCPU(s, excl)
	secs := time.Since(started).Seconds()
	perSec := func(ticks int64) float64 { return ticksToMicros(ticks, 1) / secs }
	out := &IdleCost{Seconds: secs, ServerMicros: perSec(cpu1.server - cpu0.server)}
	for i, n := range s.nodes {
		stmts, err := nodeStatements(ctx, n, s.citus && i > 0)
		if err != nil {
			return nil, err
		}
		lsn1, err := currentLSN(ctx, n.db)
		if err != nil {
			return nil, err
		}
		wal, err := n.db.QueryInt(ctx, `-- probe
			SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint`, lsn1, lsn0[i])
		if err != nil {
			return nil, err
		}
		var calls int64
		for _, st := range stmts {
			if !transactionControl(st.Name) {
				calls += st.Calls
			}
		}
		out.Nodes = append(out.Nodes, IdleNode{n.name, perSec(cpu1.nodes[i] - cpu0.nodes[i]), float64(wal) / secs, float64(calls) / secs,
			float64(roundTrips(stmts, s.citus && i == 0)) / secs, stmts})
	}
	return out, nil
}

// openNode opens the bench's probe of one database node and finds its postmaster; create
// makes pg_stat_statements in its database.
func openNode(ctx context.Context, name, url string, create bool) (*dbNode, error) {
	db, err := openProbe(ctx, url)
	if err != nil {
		return nil, err
	}
	n := &dbNode{name: name, db: db}
	if n.database, err = currentDatabase(ctx, db); err != nil {
		db.Close()
		return nil, err
	}
	pid, err := db.QueryInt(ctx, `-- probe
		SELECT pg_backend_pid()`)
	if err != nil {
		db.Close()
		return nil, err
	}
	n.postmaster = postmasterOf(int(pid))
	if !create {
		return n, nil
	}
	if _, err := db.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		db.Close()
		return nil, fmt.Errorf("%s: pg_stat_statements is needed for the per-step counters: %w", name, err)
	}
	return n, nil
}

// nodesDrain inserts jobs jobs of steps steps into a paused queue of side s (calls of
// perCall jobs), vacuums, waits for the statistics to settle as the plain drains do,
// then drains the queue and measures it; the queue is paused again after (an idle queue
// on Citus polls every shard once a second).
func nodesDrain(ctx context.Context, o options, s nodesSide, queue string, pair, jobs, steps, perCall int) (NodesDrain, error) {
	return nodesDrainWith(ctx, o, s, queue, pair, jobs, steps, perCall, "")
}

// nodesDrainWith is nodesDrain with extra fields in every job (bulkInsertWith).
func nodesDrainWith(ctx context.Context, o options, s nodesSide, queue string, pair, jobs, steps, perCall int, extra string) (NodesDrain, error) {
	if err := call(s.api, "PUT", "/v1/queues/"+queue, fmt.Sprintf(`{"paused": true, "max_in_flight": %d, "batch": %d}`, o.maxInFlight, o.batch)); err != nil {
		return NodesDrain{}, err
	}
	if _, err := bulkInsertWith(s.api, "bench", queue, jobs, steps, 1, perCall, extra); err != nil {
		return NodesDrain{}, err
	}
	coord := s.nodes[0].db
	if err := vacuumAnalyze(ctx, o, coord, "jobs"); err != nil {
		return NodesDrain{}, err
	}
	time.Sleep(statsSettle) // the same quiet start as the plain drains
	total := jobs * steps
	served, err := receiverStats(s.recvAddr)
	if err != nil {
		return NodesDrain{}, err
	}
	target := served["requests"] + int64(total)
	for _, n := range s.nodes {
		if _, err := n.db.Exec(ctx, `-- probe
			SELECT pg_stat_statements_reset()`); err != nil {
			return NodesDrain{}, err
		}
	}
	excl := make([]map[int]bool, len(s.nodes))
	lsn0 := make([]string, len(s.nodes))
	for i, n := range s.nodes {
		excl[i] = probeBackends(ctx, n.db)
		if lsn0[i], err = currentLSN(ctx, n.db); err != nil {
			return NodesDrain{}, err
		}
	}
	cpu0 := nodesCPU(s, excl)
	started := time.Now()
	if err := resumeQueue(s.api, queue); err != nil {
		return NodesDrain{}, err
	}
	// The receiver's count first (no statement: on Citus a poll of jobs runs on every
	// shard), then one probe that every outcome is written.
	for {
		if time.Since(started) > 10*time.Minute {
			return NodesDrain{}, fmt.Errorf("%s: the drain did not finish in 10 minutes", queue)
		}
		time.Sleep(10 * time.Millisecond)
		st, err := receiverStats(s.recvAddr)
		if err != nil {
			return NodesDrain{}, err
		}
		if st["requests"] < target {
			continue
		}
		left, err := coord.QueryInt(ctx, `-- probe
			SELECT count(*) FROM jobs WHERE status = 'executing' AND queue = $1`, queue)
		if err != nil {
			return NodesDrain{}, err
		}
		if left == 0 {
			break
		}
	}
	secs := time.Since(started).Seconds()
	cpu1 := nodesCPU(s, excl)
	d := NodesDrain{Side: s.name, Pair: pair, Jobs: jobs, Steps: total, Seconds: secs, PerSecond: float64(total) / secs,
		ServerMicros:   ticksToMicros(cpu1.server-cpu0.server, total),
		ReceiverMicros: ticksToMicros(cpu1.receiver-cpu0.receiver, total)}
	// Every node at once: an idle feeder's empty claim on Citus tries every shard, so
	// nodes read one after the other would count different numbers of them.
	type reading struct {
		lsn   string
		stmts []StatementStat
		err   error
	}
	readings := make([]reading, len(s.nodes))
	var wg sync.WaitGroup
	for i, n := range s.nodes {
		wg.Go(func() {
			r := &readings[i]
			if r.stmts, r.err = nodeStatements(ctx, n, s.citus && i > 0); r.err == nil {
				r.lsn, r.err = currentLSN(ctx, n.db)
			}
		})
	}
	wg.Wait()
	for i, n := range s.nodes {
		if readings[i].err != nil {
			return NodesDrain{}, readings[i].err
		}
		stmts := readings[i].stmts
		wal, err := n.db.QueryInt(ctx, `-- probe
			SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint`, readings[i].lsn, lsn0[i])
		if err != nil {
			return NodesDrain{}, err
		}
		nc := NodeCost{Node: n.name, CPUMicros: ticksToMicros(cpu1.nodes[i]-cpu0.nodes[i], total),
			WALBytes: float64(wal) / float64(total), StatementStats: stmts}
		var calls, stmtWAL int64
		var exec, plan float64
		for _, st := range stmts {
			if !transactionControl(st.Name) {
				calls += st.Calls
			}
			stmtWAL += st.WALBytes
			exec += st.ExecMS
			plan += st.PlanMS
		}
		nc.Statements = float64(calls) / float64(total)
		nc.RoundTrips = float64(roundTrips(stmts, s.citus && i == 0)) / float64(total)
		nc.StatementWALBytes = float64(stmtWAL) / float64(total)
		nc.ExecMicros = exec * 1000 / float64(total)
		nc.PlanMicros = plan * 1000 / float64(total)
		d.Nodes = append(d.Nodes, nc)
	}
	if err := call(s.api, "PUT", "/v1/queues/"+queue, `{"paused": true}`); err != nil {
		return NodesDrain{}, err
	}
	if done, err := coord.QueryInt(ctx, `-- probe
		SELECT count(*) FROM jobs WHERE queue = $1 AND status = 'done'`, queue); err != nil {
		return NodesDrain{}, err
	} else if done != int64(jobs) {
		return NodesDrain{}, fmt.Errorf("%s: %d of %d jobs done", queue, done, jobs)
	}
	if s.citus {
		if d.JobsByNode, d.Shards, err = jobsByNode(ctx, s, queue); err != nil {
			return NodesDrain{}, err
		}
	}
	return d, nil
}

// probeBackends is the backend of the bench's probe on a node, left out of its CPU.
func probeBackends(ctx context.Context, db *pg.DB) map[int]bool {
	out := map[int]bool{}
	if pid, err := db.QueryInt(ctx, `-- probe
		SELECT pg_backend_pid()`); err == nil {
		out[int(pid)] = true
	}
	return out
}

func currentLSN(ctx context.Context, db *pg.DB) (string, error) {
	rows, err := db.QueryStrings(ctx, `-- probe
		SELECT pg_current_wal_lsn()::text`)
	if err != nil {
		return "", err
	}
	return rows[0][0], nil
}

type nodesCPUSnapshot struct {
	server, receiver int64
	nodes            []int64
}

func nodesCPU(s nodesSide, exclude []map[int]bool) nodesCPUSnapshot {
	c := nodesCPUSnapshot{server: processCPU(s.server), receiver: processCPU(s.receiver)}
	for i, n := range s.nodes {
		c.nodes = append(c.nodes, postgresCPU(n.postmaster, exclude[i]))
	}
	return c
}

// nodeStatements reads one node's pg_stat_statements, grouped by statement: by the
// "-- name:" comment of gendurable's SQL on the node the server talks to; on a Citus
// worker, where the coordinator sends each task as SQL it deparsed (comments gone, the
// shard's table names in it), by workerStatementName. The bench's own statements and
// the queue's resume (an upsert of a reference table) are left out. On a worker only
// top-level statements count: a statement the server routed there runs its shard's task
// by Citus's local execution, which pg_stat_statements (track = all) would count again
// as a nested statement, its time and WAL with it.
func nodeStatements(ctx context.Context, n *dbNode, worker bool) ([]StatementStat, error) {
	rows, err := n.db.QueryStrings(ctx, `-- probe
		SELECT coalesce(substring(query FROM '-- name: (\w+)'), regexp_replace(regexp_replace(query, '_[0-9]{6,}', '', 'g'), '\s+', ' ', 'g')),
		       sum(calls)::bigint, sum(rows)::bigint, sum(total_exec_time)::float8, sum(total_plan_time)::float8, sum(wal_bytes)::bigint, sum(wal_records)::bigint, sum(plans)::bigint
		FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1) AND query NOT LIKE '-- probe%'
		  AND (toplevel OR NOT $2)
		GROUP BY 1`, n.database, worker)
	if err != nil {
		return nil, err
	}
	by := map[string]*StatementStat{}
	for _, r := range rows {
		name := r[0]
		if worker && !nameRe.MatchString(name) {
			name = workerStatementName(name)
		} else if worker {
			name = directPrefix + name // the server's own, sent to the worker of its shard
		} else if len(name) > 60 {
			name = name[:60]
		}
		if name == "" || name == "QueueUpsert" || name == "QueueCounts" || strings.HasPrefix(name, "Handler") {
			continue
		}
		st := by[name]
		if st == nil {
			st = &StatementStat{Name: name}
			by[name] = st
		}
		calls, _ := strconv.ParseInt(r[1], 10, 64)
		nrows, _ := strconv.ParseInt(r[2], 10, 64)
		exec, _ := strconv.ParseFloat(r[3], 64)
		plan, _ := strconv.ParseFloat(r[4], 64)
		walBytes, _ := strconv.ParseInt(r[5], 10, 64)
		walRecords, _ := strconv.ParseInt(r[6], 10, 64)
		st.Calls += calls
		st.Rows += nrows
		st.ExecMS += exec
		st.PlanMS += plan
		plans, _ := strconv.ParseInt(r[7], 10, 64)
		st.Plans += plans
		st.WALBytes += walBytes
		st.WALRecords += walRecords
	}
	out := make([]StatementStat, 0, len(by))
	for _, st := range by {
		out = append(out, *st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Calls > out[j].Calls })
	return out, nil
}

// nameRe matches the name of one of gendurable's statements, as nodeStatements reads it.
var nameRe = regexp.MustCompile(`^[A-Z]\w+$`)

// directPrefix marks, on a worker, a statement the server sent there itself (a shard's
// statement routed to its worker: internal/pg/citus_direct.go), not a task of the
// coordinator's.
const directPrefix = "server → "

// workerStatementName names a task a Citus worker ran (the text, shard numbers taken out)
// by the statement of internal/pg/sql/citus it comes from, when its deparsed text says
// so, else by its first 60 characters; "" for the bench's own polls and the queue's
// resume (an upsert of queues, a reference table, in a two-phase commit whose PREPARE and
// COMMIT PREPARED are counted: other writes of reference tables, the gate reconciler's,
// make them too).
func workerStatementName(q string) string {
	l := strings.ToLower(q)
	has := func(s ...string) bool {
		for _, x := range s {
			if !strings.Contains(l, x) {
				return false
			}
		}
		return true
	}
	pre := func(s string) bool { return strings.HasPrefix(l, s) }
	switch {
	case pre("begin"):
		return workerBegin
	case pre("select assign_distributed_transaction_id"):
		return "assign_distributed_transaction_id"
	case pre("insert into public.queues"):
		return "" // the resume (plain PostgreSQL's QueueUpsert is left out likewise)
	case pre("prepare transaction"):
		return "PREPARE TRANSACTION (2PC of a reference table's write)"
	case pre("commit prepared"):
		return "COMMIT PREPARED"
	case pre("commit"):
		return "COMMIT"
	case pre("select count(*) as count from public.jobs"):
		return ""
	case pre("with candidates as"):
		return "JobClaim"
	case pre("select exists") && has("public.jobs"):
		return "JobReadyExists"
	case has("update public.jobs", "o.kind"):
		return "JobApply(Plain)Outcomes, the UPDATE"
	case pre("insert into public.steps"):
		return "StepInsertApplied"
	case pre("insert into public.jobs"):
		return "JobInsert(Children)"
	case pre("with due as"):
		return "JobWakeExpiredAwaits"
	case pre("select x.id, x.lease_token"):
		return "JobListExpiredLeases"
	case pre("select placement from public.jobs") && has("lease_expires_at"):
		return "JobExpiredLeasePlacements (the reaper's probe)"
	case pre("select placement from public.jobs") && has("eligible_at"):
		return "JobDueAwaitPlacements (the reaper's probe)"
	case pre("with e as") && has("update public.jobs"):
		return "JobReapExpiredLeases"
	case has("update public.jobs", "lease_expires_at") && !has("o.kind"):
		return "LeaseExtendMany / LeaseReleaseMany"
	}
	if len(q) > 60 {
		q = q[:60]
	}
	return q
}

// workerBegin is the BEGIN Citus sends to a worker in one string with
// assign_distributed_transaction_id: one round trip for both.
const workerBegin = "BEGIN (with assign_distributed_transaction_id)"

// transactionControl reports whether a statement is BEGIN or COMMIT, which the counts of
// statements leave out: on the coordinator pg_stat_statements counts them only for a
// few of the server's pipelined batches (3 of 16 in one drain), as it counts utility
// statements run from a cached prepared statement.
func transactionControl(name string) bool {
	return name == "BEGIN" || name == "COMMIT" || name == workerBegin
}

// roundTrips counts the requests that reached a node. On a Citus coordinator: every
// statement but those the server pipelines in one pgx batch with an outcome or a reap
// (BEGIN, the UPDATE, the history INSERT, COMMIT: docs/citus.md), which count once, as
// the UPDATE. On a worker: every statement, COMMIT included, but the BEGIN that Citus
// sends in one string with assign_distributed_transaction_id. On plain PostgreSQL: every
// statement (the server sends no batch there).
//
// A worker also gets the statements the server routes to it (directPrefix), pipelined
// as on the coordinator: their BEGIN reads as workerBegin, and the COMMIT of each of
// the server's batches (an outcome's, a reap's) is taken off the COMMITs.
func roundTrips(stmts []StatementStat, coordinator bool) int64 {
	var n, batches int64
	for _, st := range stmts {
		name, direct := strings.CutPrefix(st.Name, directPrefix)
		switch {
		case st.Name == workerBegin:
		case (coordinator || direct) && citusPipelined[name]:
		default:
			n += st.Calls
		}
		if direct && citusBatchLead[name] {
			batches += st.Calls
		}
	}
	return n - batches
}

// citusBatchLead are the statements that lead a pgx batch of the Citus dialect (BEGIN,
// the statement, what is pipelined behind it, COMMIT).
var citusBatchLead = map[string]bool{"JobApplyPlainOutcomes": true, "JobApplyOutcomes": true, "JobReapExpiredLeases": true}

// citusPipelined are the statements the Citus dialect sends only behind another in a pgx
// batch (internal/pg/citus_dialect.go): they share its round trip.
var citusPipelined = map[string]bool{"BEGIN": true, "COMMIT": true, "StepInsertApplied": true, "JobInsertChildren": true,
	"QueueEnsureMany": true, "CitusShardGuard": true}

// jobsByNode is where a drained queue's jobs lived: jobs by worker, and the number of
// shards that held them.
func jobsByNode(ctx context.Context, s nodesSide, queue string) (map[string]int64, int, error) {
	coord := s.nodes[0].db
	rows, err := coord.QueryStrings(ctx, `-- probe
		WITH p AS (SELECT placement, count(*) AS n FROM jobs WHERE queue = $1 GROUP BY placement),
		     s AS (SELECT get_shard_id_for_distribution_column('jobs', placement) AS shard, n FROM p)
		SELECT (SELECT nodeport FROM pg_dist_shard_placement sp WHERE sp.shardid = s.shard LIMIT 1)::text,
		       count(DISTINCT shard)::text, sum(n)::bigint::text
		FROM s GROUP BY 1`, queue)
	if err != nil {
		return nil, 0, err
	}
	ports := map[string]string{}
	for _, n := range s.nodes[1:] {
		if p, err := n.db.QueryStrings(ctx, `-- probe
			SELECT inet_server_port()::text`); err == nil && len(p) > 0 {
			ports[p[0][0]] = n.name
		}
	}
	out := map[string]int64{}
	shards := 0
	for _, r := range rows {
		name := ports[r[0]]
		if name == "" {
			name = "port " + r[0]
		}
		k, _ := strconv.Atoi(r[1])
		shards += k
		out[name], _ = strconv.ParseInt(r[2], 10, 64)
	}
	return out, shards, nil
}

// plainNodesSide is the bench's first server on its plain PostgreSQL, as a -citus side.
func plainNodesSide(m *meter, db *pg.DB, database, api string, server int, recvAddr string) nodesSide {
	return nodesSide{name: "PostgreSQL", api: api, server: server, recvAddr: recvAddr, receiver: m.receiver,
		nodes: []*dbNode{{name: "PostgreSQL", db: db, database: database, postmaster: m.postmaster}}}
}

// citusAvailable says why the -citus mode cannot run here, or "" when it can.
func citusUnavailable() string {
	if !pg.CitusAvailable() {
		return pg.ErrNoCitus.Error()
	}
	if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(os.Getpid()))); err != nil {
		return "the -citus mode reads each node's CPU from /proc (Linux)"
	}
	return ""
}
