package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// riverPeer is the River program of bench/river (its own Go module) running as a child
// process, driven one command a line over its stdin.
type riverPeer struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

// buildRiver builds the River peer from dir (a module of its own, so the service's
// go.mod never sees River) into out.
func buildRiver(dir, out string) error {
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return fmt.Errorf("no River peer module at %s (run the bench from the repository root, or pass -river-dir; -peer=false skips River): %w", dir, err)
	}
	build := exec.Command("go", "build", "-o", out, ".")
	build.Dir = dir
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building the River peer in %s: %w", dir, err)
	}
	return nil
}

// startRiver starts the peer and waits until it has migrated River's schema, started its
// client and paused its queue.
func startRiver(bin string, args ...string) (*riverPeer, error) {
	cmd := exec.Command(bin, args...)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &riverPeer{cmd: cmd, in: in, out: bufio.NewReader(out)}
	ready := make(chan error, 1)
	go func() {
		line, err := p.out.ReadString('\n')
		if err == nil && strings.TrimSpace(line) != "ready" {
			err = fmt.Errorf("unexpected first line %q", line)
		}
		ready <- err
	}()
	select {
	case err = <-ready:
	case <-time.After(60 * time.Second):
		err = fmt.Errorf("not ready after 60s")
	}
	if err != nil {
		p.stop()
		return nil, fmt.Errorf("the River peer did not start: %w", err)
	}
	return p, nil
}

// do sends one command and returns the answer's line.
func (p *riverPeer) do(command string) (string, error) {
	if _, err := io.WriteString(p.in, command+"\n"); err != nil {
		return "", err
	}
	line, err := p.out.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("the River peer, %s: %w", command, err)
	}
	line = strings.TrimSpace(line)
	if strings.HasPrefix(line, "error ") {
		return "", fmt.Errorf("the River peer, %s: %s", command, strings.TrimPrefix(line, "error "))
	}
	return line, nil
}

// insert inserts n jobs into the paused queue and returns the seconds of each
// InsertMany call.
func (p *riverPeer) insert(n int) ([]float64, error) {
	line, err := p.do("insert " + strconv.Itoa(n))
	if err != nil {
		return nil, err
	}
	f := strings.Fields(line) // inserted N total call...
	if len(f) < 4 || f[0] != "inserted" {
		return nil, fmt.Errorf("the River peer, insert: unexpected answer %q", line)
	}
	calls := make([]float64, 0, len(f)-3)
	for _, s := range f[3:] {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("the River peer, insert: unexpected answer %q", line)
		}
		calls = append(calls, v)
	}
	return calls, nil
}

func (p *riverPeer) stop() {
	_, _ = io.WriteString(p.in, "quit\n")
	_ = p.in.Close()
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}
