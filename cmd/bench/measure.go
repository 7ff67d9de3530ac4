package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
)

// StatementStat is one statement family's share of a drain, from pg_stat_statements
// (reset just before the drain). Times are milliseconds, summed over every call.
type StatementStat struct {
	Name       string  `json:"name"`
	Calls      int64   `json:"calls"`
	Rows       int64   `json:"rows"`
	ExecMS     float64 `json:"exec_ms"`
	PlanMS     float64 `json:"plan_ms"`
	Plans      int64   `json:"plans"` // times planned (a prepared statement's cached plan is not)
	WALBytes   int64   `json:"wal_bytes"`
	WALRecords int64   `json:"wal_records"`
}

// Drain is one measured drain of one side: throughput, CPU per step by process over the
// drain window, and the statements the side's database ran in it.
type Drain struct {
	Side           string             `json:"side"`
	Pair           int                `json:"pair,omitempty"`
	Jobs           int                `json:"jobs"`
	Steps          int                `json:"steps"`
	Seconds        float64            `json:"seconds"`
	PerSecond      float64            `json:"per_second"`
	CPUMicros      map[string]float64 `json:"cpu_us_per_step"`
	StatementsStep float64            `json:"statements_per_step"`
	WALBytesStep   float64            `json:"wal_bytes_per_step"`
	ExecMicrosStep float64            `json:"exec_us_per_step"`
	// SwitchesStep is the machine's context switches a step over the drain window
	// (/proc/stat ctxt): every process's, the bench's too. It grows as more processes than
	// cores take turns.
	SwitchesStep float64         `json:"context_switches_per_step"`
	Statements   []StatementStat `json:"statements"`
}

// Process names of Drain.CPUMicros.
const (
	procEngine   = "engine" // the gendurable server, or the River peer
	procPostgres = "postgres"
	procReceiver = "receiver"
)

// meter reads the CPU of the processes in a drain and the statements of its database.
type meter struct {
	db         *pg.DB // the bench's own connection (one, so its backend is known)
	probes     []*pg.DB
	postmaster int
	receiver   int
}

// side is what a drain needs to know of the system under test.
type side struct {
	name     string
	pids     []int  // the server processes, or the River peer
	database string // whose pg_stat_statements rows count
	start    func() error
	finished func(ctx context.Context) (bool, error)
	stop     func() error
}

func newMeter(ctx context.Context, db *pg.DB, receiver int, probes ...*pg.DB) (*meter, error) {
	m := &meter{db: db, probes: probes, receiver: receiver}
	pid, err := db.QueryInt(ctx, `-- probe
		SELECT pg_backend_pid()`)
	if err != nil {
		return nil, err
	}
	m.postmaster = postmasterOf(int(pid))
	if _, err := db.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		return nil, fmt.Errorf("pg_stat_statements is needed for the per-step counters: %w", err)
	}
	return m, nil
}

// benchBackends are the backends of the bench's own probes, left out of PostgreSQL's CPU.
func (m *meter) benchBackends(ctx context.Context) map[int]bool {
	out := map[int]bool{}
	for _, db := range append([]*pg.DB{m.db}, m.probes...) {
		if pid, err := db.QueryInt(ctx, `-- probe
			SELECT pg_backend_pid()`); err == nil {
			out[int(pid)] = true
		}
	}
	return out
}

type cpuSnapshot struct{ engine, postgres, receiver, switches int64 }

func (m *meter) cpu(s side, exclude map[int]bool) cpuSnapshot {
	c := cpuSnapshot{receiver: processCPU(m.receiver), switches: machineSwitches()}
	for _, pid := range s.pids {
		c.engine += processCPU(pid)
	}
	if m.postmaster > 0 {
		c.postgres = postgresCPU(m.postmaster, exclude)
	}
	return c
}

// drain runs one drain: statements reset, CPU read, the side started, polled every 10 ms
// until it has nothing left to run, CPU and statements read again, the side stopped.
func (m *meter) drain(ctx context.Context, s side, pair, jobs, steps int) (Drain, error) {
	if _, err := m.db.Exec(ctx, `-- probe
		SELECT pg_stat_statements_reset()`); err != nil {
		return Drain{}, err
	}
	exclude := m.benchBackends(ctx)
	before := m.cpu(s, exclude)
	started := time.Now()
	if err := s.start(); err != nil {
		return Drain{}, err
	}
	for {
		done, err := s.finished(ctx)
		if err != nil {
			return Drain{}, err
		}
		if done {
			break
		}
		if time.Since(started) > 10*time.Minute {
			return Drain{}, fmt.Errorf("%s: the drain did not finish in 10 minutes", s.name)
		}
		time.Sleep(10 * time.Millisecond)
	}
	secs := time.Since(started).Seconds()
	for pid := range m.benchBackends(ctx) {
		exclude[pid] = true
	}
	after := m.cpu(s, exclude)
	stmts, err := m.statements(ctx, s.database)
	if err != nil {
		return Drain{}, err
	}
	if s.stop != nil {
		if err := s.stop(); err != nil {
			return Drain{}, err
		}
	}
	total := jobs * steps
	d := Drain{Side: s.name, Pair: pair, Jobs: jobs, Steps: total, Seconds: secs, PerSecond: float64(total) / secs,
		CPUMicros: map[string]float64{
			procEngine:   ticksToMicros(after.engine-before.engine, total),
			procReceiver: ticksToMicros(after.receiver-before.receiver, total),
		},
		Statements: stmts}
	if m.postmaster > 0 {
		d.CPUMicros[procPostgres] = ticksToMicros(after.postgres-before.postgres, total)
	}
	var calls, wal int64
	var exec float64
	for _, st := range stmts {
		calls += st.Calls
		wal += st.WALBytes
		exec += st.ExecMS
	}
	d.StatementsStep = float64(calls) / float64(total)
	d.WALBytesStep = float64(wal) / float64(total)
	d.ExecMicrosStep = exec * 1000 / float64(total)
	d.SwitchesStep = float64(after.switches-before.switches) / float64(total)
	return d, nil
}

// machineSwitches is the context switches the machine has made since boot (/proc/stat
// ctxt), 0 when unreadable.
func machineSwitches() int64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "ctxt "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// statements reads pg_stat_statements for one database, by statement name (the
// "-- name: X" comment both gendurable's and River's SQL start with; the first words of
// the text for the rest), busiest first.
func (m *meter) statements(ctx context.Context, database string) ([]StatementStat, error) {
	rows, err := m.db.QueryStrings(ctx, `-- probe
		SELECT coalesce(substring(query FROM '-- name: (\w+)'), left(regexp_replace(query, '\s+', ' ', 'g'), 40)),
		       sum(calls)::bigint, sum(rows)::bigint, sum(total_exec_time)::float8, sum(total_plan_time)::float8, sum(wal_bytes)::bigint, sum(wal_records)::bigint, sum(plans)::bigint
		FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1) AND query NOT LIKE '-- probe%'
		GROUP BY 1`, database)
	if err != nil {
		return nil, err
	}
	out := make([]StatementStat, 0, len(rows))
	for _, r := range rows {
		st := StatementStat{Name: r[0]}
		st.Calls, _ = strconv.ParseInt(r[1], 10, 64)
		st.Rows, _ = strconv.ParseInt(r[2], 10, 64)
		st.ExecMS, _ = strconv.ParseFloat(r[3], 64)
		st.PlanMS, _ = strconv.ParseFloat(r[4], 64)
		st.Plans, _ = strconv.ParseInt(r[7], 10, 64)
		st.WALBytes, _ = strconv.ParseInt(r[5], 10, 64)
		st.WALRecords, _ = strconv.ParseInt(r[6], 10, 64)
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ExecMS > out[j].ExecMS })
	return out, nil
}

// mergeStatements sums the statements of several drains by name, busiest first.
func mergeStatements(drains []Drain) []StatementStat {
	by := map[string]*StatementStat{}
	for _, d := range drains {
		for _, st := range d.Statements {
			t := by[st.Name]
			if t == nil {
				t = &StatementStat{Name: st.Name}
				by[st.Name] = t
			}
			t.Calls += st.Calls
			t.Rows += st.Rows
			t.ExecMS += st.ExecMS
			t.PlanMS += st.PlanMS
			t.Plans += st.Plans
			t.WALBytes += st.WALBytes
			t.WALRecords += st.WALRecords
		}
	}
	out := make([]StatementStat, 0, len(by))
	for _, t := range by {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ExecMS > out[j].ExecMS })
	return out
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
