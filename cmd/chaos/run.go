package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// run sets everything up, drains under faults, checks and tears everything down. The
// summary is returned whenever the drain started, also with an error.
func run(ctx context.Context, o options) (*summary, error) {
	began := time.Now()
	logf := func(format string, args ...any) {
		if o.verbose {
			fmt.Printf("%6.1fs  %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
		}
	}
	tmp, err := os.MkdirTemp("", "gdchaos")
	if err != nil {
		return nil, err
	}
	pgDir := filepath.Join(tmp, "pg") // its own directory: the postgres user must own it
	if err := os.MkdirAll(pgDir, 0o700); err != nil {
		return nil, err
	}
	defer func() {
		if o.keep {
			fmt.Printf("kept: %s (cluster in pg/data, its log pg/server.log, server logs server-*.log)\n", tmp)
			return
		}
		_ = os.RemoveAll(tmp)
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, err
	}

	if o.server == "" {
		o.server = filepath.Join(tmp, "gendurable")
		fmt.Println("chaos: building ./cmd/server")
		build := exec.CommandContext(ctx, "go", "build", "-o", o.server, "./cmd/server")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return nil, fmt.Errorf("building the server: %w", err)
		}
	}
	var enabled []string
	for _, name := range faultNames {
		if o.faults[name] {
			enabled = append(enabled, name)
		}
	}
	fmt.Printf("chaos: mode %s, seed %d, %d jobs, fault phase %s, %d servers, lease %s, faults: %s\n",
		o.mode, o.seed, o.jobs, o.duration, o.servers, o.leaseTTL, strings.Join(enabled, ","))

	p, err := startPostgres(ctx, pgDir)
	if err != nil {
		return nil, err
	}
	defer p.stop()
	rng := newRand(o.seed)
	f, err := newFleet(o.server, p.url(), o.servers, o.leaseTTL, tmp)
	if err != nil {
		return nil, err
	}
	defer f.stop()
	// The first server applies the migrations alone; then the others.
	if err := f.start(f.slots[0]); err != nil {
		return nil, err
	}
	if err := waitSlot(ctx, f.slots[0], 60*time.Second); err != nil {
		return nil, err
	}
	for _, s := range f.slots[1:] {
		if err := f.start(s); err != nil {
			return nil, err
		}
	}
	if err := f.waitUp(ctx, 60*time.Second); err != nil {
		return nil, err
	}
	api := newAPIClient(f, rng)
	recv, err := startReceiver(ctx, api, rng)
	if err != nil {
		return nil, err
	}
	defer recv.stop()
	if err := api.must(ctx, "PUT", "/v1/handlers/chaos", fmt.Sprintf(
		`{"url": "http://%s/step", "secret": %q, "timeout": "3s", "max_attempts": 1000, "backoff_base": "100ms", "backoff_max": "1s"}`,
		recv.addr, chaosSecret)); err != nil {
		return nil, err
	}
	if err := api.must(ctx, "PUT", "/v1/queues/chaos", `{"max_in_flight": 50, "batch": 25}`); err != nil {
		return nil, err
	}

	// The drain: inserts paced over 70 % of the fault phase, faults all along it.
	drainStart := time.Now()
	ins := &inserter{api: api, rng: rng, seed: o.seed, acked: map[int64]int{}}
	insCtx, stopInserts := context.WithCancel(ctx)
	defer stopInserts()
	insDone := make(chan struct{})
	go func() { defer close(insDone); ins.run(insCtx, o.jobs, o.duration*7/10) }()

	fx := &faults{o: o, pg: p, fleet: f, rng: rng, logf: logf}
	faultCtx, stopFaults := context.WithTimeout(ctx, o.duration)
	defer stopFaults()
	faultsDone := make(chan struct{})
	go func() { defer close(faultsDone); fx.run(faultCtx) }()

	mon := &monitor{pg: p, ins: ins, logf: logf}
	// The fault phase ends at its duration, or earlier once every job is done.
	go func() {
		for sleep(faultCtx, time.Second) {
			if done := mon.allDone(faultCtx); done && ins.finished.Load() {
				stopFaults()
			}
		}
	}()
	<-faultsDone
	faultPhase := time.Since(drainStart)
	fmt.Printf("chaos: fault phase over after %s (%s, %d kills); settling\n", faultPhase.Round(time.Second), fx, f.kills.Load())

	// Settle: every server up, then wait for the drain to finish.
	if err := f.waitUp(ctx, 60*time.Second); err != nil {
		fmt.Println("chaos:", err)
	}
	settleCtx, cancelSettle := context.WithTimeout(ctx, o.settle)
	for sleep(settleCtx, 500*time.Millisecond) {
		if ins.finished.Load() && mon.allDone(settleCtx) {
			break
		}
	}
	cancelSettle()
	stopInserts()
	<-insDone
	drain := time.Since(drainStart)
	// Stop the servers before checking: nothing changes the database any more.
	f.stop()
	recv.stop()

	cctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var mustFail []string
	if o.sabotage {
		if mustFail, err = sabotage(cctx, p, ins); err != nil {
			return nil, err
		}
	}
	sum, err := check(cctx, p, ins, recv)
	if sum != nil {
		sum.MustFail = mustFail
		sum.fill(o, fx, f, recv, ins, api, drain, faultPhase, time.Since(began))
	}
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("the run was cut short: %w", context.Cause(ctx))
	}
	return sum, err
}

func waitSlot(ctx context.Context, s *slot, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		up := s.up
		s.mu.Unlock()
		if up {
			return nil
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
	return fmt.Errorf("server %d did not become ready within %s (see its log)", s.i, within)
}

// monitor answers whether the drain is over (and logs progress in verbose mode).
type monitor struct {
	pg   *postgres
	ins  *inserter
	logf func(string, ...any)
	last time.Time
}

func (m *monitor) allDone(ctx context.Context) bool {
	qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	rows, err := m.pg.pool.Query(qctx, `SELECT status, count(*) FROM jobs GROUP BY status ORDER BY status`)
	if err != nil {
		return false
	}
	defer rows.Close()
	var live, total int64
	var parts []string
	for rows.Next() {
		var s string
		var n int64
		if rows.Scan(&s, &n) != nil {
			return false
		}
		total += n
		if s == "runnable" || s == "executing" || s == "awaiting" {
			live += n
		}
		parts = append(parts, fmt.Sprintf("%s %d", s, n))
	}
	if rows.Err() != nil {
		return false
	}
	if time.Since(m.last) > 5*time.Second {
		m.last = time.Now()
		m.logf("jobs: %s", strings.Join(parts, ", "))
	}
	m.ins.mu.Lock()
	acked := int64(len(m.ins.acked))
	m.ins.mu.Unlock()
	return live == 0 && total >= acked
}
