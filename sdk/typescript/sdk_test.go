// Package typescript_test runs the TypeScript SDK's tests (node --test) against the real
// server: it builds ./cmd/server, starts it on a throwaway database, installs the SDK's
// devDependencies when node_modules is absent, checks that src/api-types.ts is what
// openapi-typescript makes of openapi.yaml, compiles the SDK, its tests and the examples
// with tsc, and runs them with GENDURABLE_URL pointing at the server.
package typescript_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// nodeTools finds node and npm: a test without them is skipped, except in CI (CI=true),
// where it fails.
func nodeTools(t *testing.T) (node, npm string) {
	var errs []error
	node, err := exec.LookPath("node")
	errs = append(errs, err)
	npm, err = exec.LookPath("npm")
	errs = append(errs, err)
	for _, err := range errs {
		if err == nil {
			continue
		}
		if os.Getenv("CI") != "" {
			t.Fatalf("CI needs Node.js and npm for the TypeScript SDK: %v", err)
		}
		t.Skipf("Node.js is not installed (%v); CI runs these tests", err)
	}
	return node, npm
}

// run runs a command in the SDK's directory and fails the test with its output.
func run(t *testing.T, ctx context.Context, env []string, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return out
}

// devDependencies makes `npm ci` run once per test binary, for the tests that need the
// SDK's devDependencies (tsc, openapi-typescript, standardwebhooks) and may run in parallel.
var devDependencies sync.Once

// installDevDependencies runs `npm ci` here when node_modules is absent.
func installDevDependencies(t *testing.T, ctx context.Context, npm string) {
	t.Helper()
	devDependencies.Do(func() {
		if _, err := os.Stat("node_modules"); err != nil {
			run(t, ctx, nil, npm, "ci", "--no-audit", "--no-fund")
		}
	})
	if _, err := os.Stat("node_modules/typescript"); err != nil {
		t.Fatalf("npm ci left no node_modules/typescript: %v", err)
	}
}

// startServer builds and starts ./cmd/server on a fresh database and answers its base URL.
func startServer(t *testing.T) string {
	dir := t.TempDir()
	bin := filepath.Join(dir, "gendurable")
	build := exec.Command("go", "build", "-o", bin, "./cmd/server")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/server: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	var logs bytes.Buffer
	srv := exec.Command(bin)
	srv.Env = append(os.Environ(), "DATABASE_URL="+pgtest.NewDatabase(t), "GENDURABLE_ADDR="+addr,
		"GENDURABLE_ALLOW_PRIVATE_WEBHOOKS=true", "GENDURABLE_API_TOKEN=")
	srv.Stdout, srv.Stderr = &logs, &logs
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = srv.Process.Kill()
		_ = srv.Wait()
		if t.Failed() {
			tail := logs.Bytes()
			if len(tail) > 8<<10 {
				tail = tail[len(tail)-8<<10:]
			}
			t.Logf("server log (the end):\n%s", tail)
		}
	})
	base := "http://" + addr
	for deadline := time.Now().Add(60 * time.Second); ; {
		if resp, err := http.Get(base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server never got ready:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestTypeScriptSDK(t *testing.T) {
	t.Parallel()
	node, npm := nodeTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	base := startServer(t)

	installDevDependencies(t, ctx, npm)

	// src/api-types.ts is committed: it must be what openapi-typescript makes of openapi.yaml now.
	fresh := filepath.Join(t.TempDir(), "api-types.ts")
	run(t, ctx, nil, node, "node_modules/openapi-typescript/bin/cli.js", "../../openapi.yaml", "-o", fresh)
	want, err := os.ReadFile(fresh)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile("src/api-types.ts"); !bytes.Equal(got, want) {
		t.Fatal("sdk/typescript/src/api-types.ts is stale: run 'npm run types' in sdk/typescript and commit it")
	}

	// tsc type-checks the SDK, its tests (types.test.ts holds the generated types to the
	// answers' real fields) and the examples.
	if err := os.RemoveAll("build"); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, nil, npm, "run", "--silent", "build:test")
	files, err := filepath.Glob("build/sdk/typescript/test/*.test.js")
	if err != nil || len(files) == 0 {
		t.Fatalf("no compiled tests under build/ (%v)", err)
	}
	out := run(t, ctx, []string{"GENDURABLE_URL=" + base}, node, append([]string{"--test", "--test-reporter=spec"}, files...)...)
	t.Logf("node --test:\n%s", out)
}
