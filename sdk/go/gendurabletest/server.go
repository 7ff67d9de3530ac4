// Package gendurabletest runs the real gendurable server binary for the integration tests
// of code that talks to it (the SDKs' own tests among them): it builds
// github.com/gendurable/gendurable/cmd/server, starts it on a free loopback port against
// the database it is given, with private webhook addresses allowed, and waits until it is
// ready. A build costs a link step when the Go build cache is warm.
package gendurabletest

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// ServerPackage is the package Start builds.
const ServerPackage = "github.com/gendurable/gendurable/cmd/server"

// Server is a running server process.
type Server struct {
	// URL is the base URL of the API, e.g. "http://127.0.0.1:40123".
	URL  string
	logs lockedBuffer
}

// Logs returns what the server wrote so far (JSON lines), for failure messages.
func (s *Server) Logs() string { return s.logs.String() }

// Start builds and starts the server against databaseURL (pgtest.NewDatabase gives one);
// env adds or overrides environment variables ("GENDURABLE_LEASE_TTL=2s"). The process is
// killed when t ends.
func Start(t testing.TB, databaseURL string, env ...string) *Server {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gendurable-server")
	build := exec.Command("go", "build", "-o", bin, ServerPackage)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", ServerPackage, err, out)
	}
	addr := freeAddr(t)
	s := &Server{URL: "http://" + addr}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+databaseURL, "GENDURABLE_ADDR="+addr,
		"GENDURABLE_ALLOW_PRIVATE_WEBHOOKS=true", "GENDURABLE_SHUTDOWN_GRACE=2s")
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = &s.logs, &s.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	s.waitReady(t, exited)
	return s
}

// waitReady polls /readyz until it answers 200, the process exits or 60s pass.
func (s *Server) waitReady(t testing.TB, exited <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			t.Fatalf("the server exited before it was ready:\n%s", s.Logs())
		default:
		}
		if resp, err := http.Get(s.URL + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s/readyz never answered 200:\n%s", s.URL, s.Logs())
}

func freeAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// lockedBuffer is a bytes.Buffer the process's two output pipes and the test share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
