package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// runBinary runs bin with args and env added, and answers its exit status and outputs.
func runBinary(t *testing.T, bin string, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return code, out.String(), errOut.String()
}

// --help and -h print the usage on stdout and exit 0, logging nothing (they exited 2 with
// an ERROR "invalid configuration: flag: help requested"); a bad flag or a stray argument
// still exits 2 with an error that says where the flags are listed.
func TestHelpExitsZero(t *testing.T) {
	t.Parallel()
	bin := build(t, t.TempDir(), "./cmd/server")
	for _, args := range [][]string{{"--help"}, {"-h"}, {"-addr", ":9", "-help"}} {
		code, stdout, stderr := runBinary(t, bin, []string{"DATABASE_URL="}, args...)
		if code != 0 || strings.Contains(stdout+stderr, `"level"`) || stderr != "" {
			t.Errorf("%v: exit %d, stderr %q, stdout:\n%s", args, code, stderr, stdout)
		}
		for _, want := range []string{"Usage:", "gendurable healthcheck", "docs/configuration.md", "-database-url", "GENDURABLE_ADDR"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("%v: the usage does not say %q:\n%s", args, want, stdout)
			}
		}
	}
	code, stdout, _ := runBinary(t, bin, nil, "healthcheck", "-h")
	if code != 0 || !strings.Contains(stdout, "-url") || !strings.Contains(stdout, "-timeout") {
		t.Errorf("healthcheck -h: exit %d:\n%s", code, stdout)
	}
	for args, want := range map[string]string{"-bogus": "gendurable --help lists the flags",
		"serve": `unexpected argument \"serve\"`} {
		code, stdout, _ := runBinary(t, bin, []string{"DATABASE_URL=postgres://x"}, args)
		if code != 2 || !strings.Contains(stdout, `"level":"ERROR"`) || !strings.Contains(stdout, want) {
			t.Errorf("%s: exit %d, want 2 and an error saying %q:\n%s", args, code, want, stdout)
		}
	}
}

// The healthcheck subcommand against a real server started on an empty database (so that
// it applies every migration): 0 once /readyz answers 200, through 127.0.0.1 when
// GENDURABLE_ADDR names no host; 1, with the reason, for a 503 and for a server that is
// gone. The start-up log of the migrations says why version 4 is absent.
func TestHealthcheckSubcommand(t *testing.T) {
	t.Parallel()
	bin := build(t, t.TempDir(), "./cmd/server")
	addr := freeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	logs := newOutput(t)
	srv := startProcess(t, bin, logs, "DATABASE_URL="+emptyDatabase(t), "GENDURABLE_ADDR="+addr,
		"GENDURABLE_ALLOW_PRIVATE_WEBHOOKS=true")
	waitReady(t, "http://"+addr+"/readyz", srv, logs)

	for _, env := range []string{"GENDURABLE_ADDR=" + addr, "GENDURABLE_ADDR=:" + port, "GENDURABLE_ADDR=0.0.0.0:" + port} {
		code, stdout, stderr := runBinary(t, bin, []string{env}, "healthcheck")
		if code != 0 || !strings.HasPrefix(stdout, "healthy: ") || !strings.Contains(stdout, `"ready"`) {
			t.Errorf("healthcheck with %s: exit %d, stdout %q, stderr %q", env, code, stdout, stderr)
		}
	}
	code, _, _ := runBinary(t, bin, nil, "healthcheck", "-url", "http://"+addr+"/readyz")
	if code != 0 {
		t.Errorf("healthcheck -url: exit %d", code)
	}
	if !strings.Contains(logs.String(), `"msg":"migrations applied"`) ||
		!strings.Contains(logs.String(), `"unused_numbers":[4],"why":"no migration was ever released under these numbers`) {
		t.Errorf("the migrations log does not explain the absent version 4:\n%s", logs.String())
	}

	notReady := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"title":"Not ready","detail":"2 migrations are not applied yet"}`))
	}))
	defer notReady.Close()
	code, _, stderr := runBinary(t, bin, nil, "healthcheck", "-url", notReady.URL+"/readyz")
	if code != 1 || !strings.Contains(stderr, "503") || !strings.Contains(stderr, "2 migrations are not applied yet") {
		t.Errorf("healthcheck of a 503: exit %d, stderr %q", code, stderr)
	}

	stopServer(t, srv, logs)
	code, _, stderr = runBinary(t, bin, []string{"GENDURABLE_ADDR=" + addr}, "healthcheck")
	if code != 1 || !strings.Contains(stderr, "unhealthy") || !strings.Contains(stderr, "connection refused") {
		t.Errorf("healthcheck of a stopped server: exit %d, stderr %q", code, stderr)
	}
}

// emptyDatabase makes a database without gendurable's schema (dropped when t ends), on
// the cluster of a pgtest database, and answers its URL.
func emptyDatabase(t *testing.T) string {
	t.Helper()
	pgtest.SkipOnCitus(t, "a plain empty database")
	base := pgtest.NewDatabase(t)
	db := pgtest.Open(t, base, pg.Options{MaxConns: 1})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(u.Path, "/") + "_empty"
	if _, err := db.Exec(context.Background(), "CREATE DATABASE "+pg.QuoteIdent(name)+" TEMPLATE template0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = db.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pg.QuoteIdent(name)+" WITH (FORCE)")
	})
	u.Path = "/" + name
	return u.String()
}

func TestMigrationsAppliedNamesTheUnusedNumbers(t *testing.T) {
	t.Parallel()
	all, err := pg.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	var versions []int
	for _, m := range all {
		versions = append(versions, m.Version)
	}
	attrs := migrationsApplied(versions)
	if len(attrs) != 6 || attrs[2] != "unused_numbers" || len(attrs[3].([]int)) != 1 || attrs[3].([]int)[0] != 4 {
		t.Fatalf("all the migrations: %v", attrs)
	}
	if attrs := migrationsApplied(versions[len(versions)-2:]); len(attrs) != 2 {
		t.Fatalf("the last two migrations: %v", attrs)
	}
}
