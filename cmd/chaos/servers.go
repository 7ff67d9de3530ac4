package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// fleet is the run's server processes: each slot keeps its loopback address across
// restarts. A process that exits without being killed by the harness is started again
// and counted: at start-up that happens while PostgreSQL is down; otherwise it is a crash.
type fleet struct {
	bin     string
	env     []string
	logDir  string
	slots   []*slot
	stopped atomic.Bool

	// startFailures: exits before /readyz answered (at start-up while PostgreSQL is down);
	// crashes: exits of a ready server the harness did not kill.
	kills, restarts, startFailures, crashes atomic.Int64
	wg                                      sync.WaitGroup
}

type slot struct {
	i    int
	addr string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd exits
	// killed marks an exit the harness caused (kill -9, or the final stop).
	killed bool
	up     bool // answered /readyz since its last start
	log    *os.File
}

func newFleet(bin, dbURL string, n int, leaseTTL time.Duration, logDir string) (*fleet, error) {
	f := &fleet{bin: bin, logDir: logDir}
	f.env = append(os.Environ(),
		"DATABASE_URL="+dbURL,
		"GENDURABLE_ALLOW_PRIVATE_WEBHOOKS=true",
		"GENDURABLE_LEASE_TTL="+leaseTTL.String(),
		"GENDURABLE_LOG_LEVEL=warn",
		"GENDURABLE_DB_MAX_CONNS=10",
		"GENDURABLE_SHUTDOWN_GRACE=2s",
		"GENDURABLE_API_TOKEN=", // the harness calls without a token
	)
	for i := range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		addr := l.Addr().String()
		_ = l.Close()
		lf, err := os.OpenFile(filepath.Join(logDir, fmt.Sprintf("server-%d.log", i)), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, err
		}
		f.slots = append(f.slots, &slot{i: i, addr: addr, log: lf})
	}
	return f, nil
}

// start starts slot s's process and a watcher that restarts it if it exits on its own.
func (f *fleet) start(s *slot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.stopped.Load() {
		return nil
	}
	cmd := exec.Command(f.bin)
	cmd.Env = append(f.env, "GENDURABLE_ADDR="+s.addr)
	cmd.Stdout, cmd.Stderr = s.log, s.log
	// Dies with the harness, whatever way the harness ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	fmt.Fprintf(s.log, "--- chaos: started pid %d at %s\n", cmd.Process.Pid, time.Now().UTC().Format(time.RFC3339Nano))
	done := make(chan struct{})
	s.cmd, s.done, s.killed, s.up = cmd, done, false, false
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		_ = cmd.Wait()
		close(done)
		s.mu.Lock()
		killed := s.killed
		wasUp := s.up
		s.mu.Unlock()
		fmt.Fprintf(s.log, "--- chaos: pid %d exited (%v) at %s\n", cmd.Process.Pid, cmd.ProcessState, time.Now().UTC().Format(time.RFC3339Nano))
		if killed || f.stopped.Load() {
			return
		}
		if wasUp {
			f.crashes.Add(1)
			fmt.Fprintf(s.log, "--- chaos: UNEXPECTED exit of a ready server\n")
		} else {
			f.startFailures.Add(1)
		}
		time.Sleep(time.Second)
		if err := f.start(s); err == nil {
			f.restarts.Add(1)
		}
	}()
	go f.watchReady(s, cmd, done)
	return nil
}

// watchReady marks the slot up once /readyz answers (bounded: 60 s).
func (f *fleet) watchReady(s *slot, cmd *exec.Cmd, done chan struct{}) {
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return
		case <-time.After(50 * time.Millisecond):
		}
		r, err := c.Get("http://" + s.addr + "/readyz")
		if err != nil {
			continue
		}
		_ = r.Body.Close()
		if r.StatusCode == 200 {
			s.mu.Lock()
			if s.cmd == cmd {
				s.up = true
			}
			s.mu.Unlock()
			return
		}
	}
}

// waitUp waits until every slot answered /readyz, or ctx ends.
func (f *fleet) waitUp(ctx context.Context, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		n := 0
		for _, s := range f.slots {
			s.mu.Lock()
			if s.up {
				n++
			}
			s.mu.Unlock()
		}
		if n == len(f.slots) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("only %d of %d servers ready: %w", n, len(f.slots), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// kill9 sends SIGKILL to slot s's process and waits for it to die.
func (f *fleet) kill9(s *slot) bool {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	if cmd == nil {
		s.mu.Unlock()
		return false
	}
	select {
	case <-done:
		s.mu.Unlock()
		return false // already gone (its watcher restarts it)
	default:
	}
	s.killed = true
	s.up = false
	s.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
	f.kills.Add(1)
	return true
}

// addrs lists the addresses of the servers that are up (all of them when none is).
func (f *fleet) addrs() []string {
	var up, all []string
	for _, s := range f.slots {
		s.mu.Lock()
		if s.up {
			up = append(up, s.addr)
		}
		s.mu.Unlock()
		all = append(all, s.addr)
	}
	if len(up) == 0 {
		return all
	}
	return up
}

// stop ends every process: SIGTERM, then SIGKILL after 5 s.
func (f *fleet) stop() {
	f.stopped.Store(true)
	for _, s := range f.slots {
		s.mu.Lock()
		cmd, done := s.cmd, s.done
		s.killed = true
		s.mu.Unlock()
		if cmd == nil {
			continue
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-done
		}
	}
	f.wg.Wait()
	for _, s := range f.slots {
		_ = s.log.Close()
	}
}
