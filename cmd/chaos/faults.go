package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// faults injects the run's failures until its context ends. Every loop is bounded by
// that context (the fault phase) and each episode by its own timeout.
type faults struct {
	o     options
	pg    *postgres
	fleet *fleet
	rng   *lockedRand
	logf  func(format string, args ...any)

	// pgMu is held while PostgreSQL is down (the other database faults wait for it).
	pgMu sync.Mutex

	pgRestarts, pgRestartFailures    atomic.Int64
	terminations, terminatedBackends atomic.Int64
	hogEpisodes, hogLimitHit         atomic.Int64
	hogMaxConns                      atomic.Int64
	lockEpisodes, lockedRows         atomic.Int64
	restartFailures                  atomic.Int64
}

// faultNames are the faults -faults may select.
var faultNames = []string{"kill", "pg-restart", "terminate", "conn-hog", "lock"}

func (f *faults) run(ctx context.Context) {
	var wg sync.WaitGroup
	loops := map[string]func(context.Context){"kill": f.killLoop, "terminate": f.terminateLoop, "lock": f.lockLoop}
	for _, name := range []string{"kill", "terminate", "lock"} {
		if !f.o.faults[name] {
			continue
		}
		loop := loops[name]
		wg.Add(1)
		go func() { defer wg.Done(); loop(ctx) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); f.scriptLoop(ctx) }()
	wg.Wait()
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// jitter is d scaled by a random factor in [0.5, 1.5).
func (f *faults) jitter(d time.Duration) time.Duration {
	return d/2 + time.Duration(f.rng.Int64N(int64(d)))
}

// killLoop kill -9s a random server every ~killEvery and starts it again 0.3–2 s later.
func (f *faults) killLoop(ctx context.Context) {
	var restarts sync.WaitGroup
	defer restarts.Wait()
	for sleep(ctx, f.jitter(f.o.killEvery)) {
		s := f.fleet.slots[f.rng.IntN(len(f.fleet.slots))]
		if !f.fleet.kill9(s) {
			continue
		}
		f.logf("kill -9 server %d", s.i)
		down := 300*time.Millisecond + time.Duration(f.rng.Int64N(int64(1700*time.Millisecond)))
		restarts.Add(1)
		go func() {
			defer restarts.Done()
			time.Sleep(down) // not cut short: a killed server always comes back
			if err := f.fleet.start(s); err != nil {
				f.restartFailures.Add(1)
				f.logf("restarting server %d: %v", s.i, err)
				return
			}
			f.fleet.restarts.Add(1)
		}()
	}
}

// scriptLoop runs the heavy database faults at fixed points of the fault phase, one at
// a time: immediate PostgreSQL restarts and max_connections exhaustion, interleaved.
func (f *faults) scriptLoop(ctx context.Context) {
	type event struct {
		at   time.Duration
		kind string
	}
	// Spread over the insert period (70 % of the phase), when the drain is surely on.
	span := f.o.duration * 7 / 10
	var events []event
	for i := range f.o.pgRestarts * boolInt(f.o.faults["pg-restart"]) {
		events = append(events, event{span * time.Duration(2*i+2) / time.Duration(2*f.o.pgRestarts+1), "pg-restart"})
	}
	for i := range f.o.hogs * boolInt(f.o.faults["conn-hog"]) {
		events = append(events, event{span * time.Duration(2*i+1) / time.Duration(2*f.o.hogs+1), "conn-hog"})
	}
	start := time.Now()
	for len(events) > 0 {
		// the earliest next
		k := 0
		for i := range events {
			if events[i].at < events[k].at {
				k = i
			}
		}
		e := events[k]
		events = append(events[:k], events[k+1:]...)
		if !sleep(ctx, time.Until(start.Add(e.at))) {
			return
		}
		switch e.kind {
		case "pg-restart":
			f.pgRestart(ctx)
		case "conn-hog":
			f.connHog(ctx)
		}
	}
}

// pgRestart stops PostgreSQL in immediate mode and starts it again 1–3 s later.
func (f *faults) pgRestart(ctx context.Context) {
	f.pgMu.Lock()
	defer f.pgMu.Unlock()
	f.logf("pg_ctl stop -m immediate")
	if err := f.pg.stopImmediate(ctx); err != nil {
		f.pgRestartFailures.Add(1)
		f.logf("immediate stop failed: %v", err)
		return
	}
	time.Sleep(time.Second + time.Duration(f.rng.Int64N(int64(2*time.Second))))
	// Start again even when the fault phase just ended: the drain needs its database.
	for try := 0; try < 5; try++ {
		sctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err := f.pg.start(sctx)
		cancel()
		if err == nil {
			f.pgRestarts.Add(1)
			f.logf("postgres is back")
			return
		}
		f.logf("restarting postgres: %v", err)
		time.Sleep(time.Second)
	}
	f.pgRestartFailures.Add(1)
}

// terminateLoop runs pg_terminate_backend on every session of the servers every ~15 s.
func (f *faults) terminateLoop(ctx context.Context) {
	for sleep(ctx, f.jitter(15*time.Second)) {
		if !f.pgMu.TryLock() {
			continue // PostgreSQL is down or being exhausted
		}
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var n int64
		err := f.pg.pool.QueryRow(qctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = $1 AND application_name = 'gendurable'`, dbName).Scan(&n)
		cancel()
		f.pgMu.Unlock()
		if err != nil {
			f.logf("pg_terminate_backend: %v", err)
			continue
		}
		f.terminations.Add(1)
		f.terminatedBackends.Add(n)
		f.logf("pg_terminate_backend: %d sessions of the servers", n)
	}
}

// connHog opens sessions until PostgreSQL refuses one for max_connections (bounded: 450
// sessions, 20 s), holds them for a few seconds, then closes them all.
func (f *faults) connHog(ctx context.Context) {
	f.pgMu.Lock()
	defer f.pgMu.Unlock()
	f.hogEpisodes.Add(1)
	var conns []*pgx.Conn
	defer func() {
		for _, c := range conns {
			cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = c.Close(cctx)
			cancel()
		}
	}()
	deadline := time.Now().Add(20 * time.Second)
	hit := false
	for len(conns) < 450 && time.Now().Before(deadline) && ctx.Err() == nil {
		c, err := f.pg.connect(ctx, "chaos-hog")
		if err != nil {
			if isTooManyClients(err) {
				hit = true
				break
			}
			f.logf("conn hog: %v", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		conns = append(conns, c)
	}
	if hit {
		f.hogLimitHit.Add(1)
	}
	if int64(len(conns)) > f.hogMaxConns.Load() {
		f.hogMaxConns.Store(int64(len(conns)))
	}
	hold := 4 * time.Second
	if f.o.mode == "short" {
		hold = 3 * time.Second
	}
	f.logf("conn hog: holding %d sessions (max_connections reached: %v) for %s", len(conns), hit, hold)
	sleep(ctx, hold)
}

// lockLoop every ~10 s opens a transaction that locks up to 30 live jobs (FOR UPDATE)
// and sits idle in it for 3–5 s before rolling back.
func (f *faults) lockLoop(ctx context.Context) {
	for sleep(ctx, f.jitter(10*time.Second)) {
		if !f.pgMu.TryLock() {
			continue
		}
		f.pgMu.Unlock() // only wait for a restart in progress; the lock may span one
		f.holdLocks(ctx)
	}
}

func (f *faults) holdLocks(ctx context.Context) {
	c, err := f.pg.connect(ctx, "chaos-locker")
	if err != nil {
		f.logf("lock holder: %v", err)
		return
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = c.Close(cctx)
		cancel()
	}()
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tx, err := c.Begin(qctx)
	if err != nil {
		return
	}
	n, err := lockSome(qctx, tx)
	if err != nil {
		_ = tx.Rollback(context.Background())
		return
	}
	f.lockEpisodes.Add(1)
	f.lockedRows.Add(int64(n))
	hold := 3*time.Second + time.Duration(f.rng.Int64N(int64(2*time.Second)))
	f.logf("idle in transaction holding %d job rows for %s", n, hold.Round(time.Millisecond))
	sleep(ctx, hold)
	rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = tx.Rollback(rctx)
	rcancel()
}

func (f *faults) String() string {
	return fmt.Sprintf("pg restarts %d, terminations %d (%d sessions), hogs %d, lock episodes %d",
		f.pgRestarts.Load(), f.terminations.Load(), f.terminatedBackends.Load(), f.hogEpisodes.Load(), f.lockEpisodes.Load())
}

// lockSome locks up to 30 random live jobs in tx and returns how many.
func lockSome(ctx context.Context, tx pgx.Tx) (int, error) {
	rows, err := tx.Query(ctx, `SELECT id FROM jobs
		WHERE status IN ('runnable', 'executing', 'awaiting')
		ORDER BY random() LIMIT 30 FOR UPDATE SKIP LOCKED`)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
	}
	return n, rows.Err()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
