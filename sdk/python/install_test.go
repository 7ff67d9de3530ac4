package python_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg/pgtest"
	"github.com/gendurable/gendurable/sdk/go/gendurabletest"
)

// venv makes a virtual environment in dir (python3 -m venv) and answers its python. On
// Debian a python3 without python3-venv has no ensurepip: that skips the test outside CI
// and fails it in CI (.ci/run installs python3-venv).
func venv(t *testing.T, ctx context.Context, py, dir string) string {
	t.Helper()
	out, err := exec.CommandContext(ctx, py, "-m", "venv", dir).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "ensurepip") && os.Getenv("CI") == "" {
			t.Skipf("python3 -m venv needs ensurepip (Debian: apt-get install python3-venv; CI=true makes this a failure):\n%s", out)
		}
		t.Fatalf("python3 -m venv %s: %v\n%s", dir, err, out)
	}
	return filepath.Join(dir, "bin", "python3")
}

// pythonEnv answers the environment for a Python run that must find gendurable only where
// it was installed: no PYTHONPATH, pip with no index, no cache and no version check.
func pythonEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PYTHONPATH=") && !strings.HasPrefix(kv, "PIP_") && !strings.HasPrefix(kv, "VIRTUAL_ENV=") {
			env = append(env, kv)
		}
	}
	return append(env, "PYTHONDONTWRITEBYTECODE=1", "PIP_NO_CACHE_DIR=1", "PIP_DISABLE_PIP_VERSION_CHECK=1",
		"PIP_NO_INDEX=1", "PIP_CONFIG_FILE=/dev/null")
}

// runPy runs a command in dir with pythonEnv and fails the test with its output.
func runPy(t *testing.T, ctx context.Context, dir string, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = pythonEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v in %s: %v\n%s", name, args, dir, err, out)
	}
	return string(out)
}

// A signed step served by the installed package's Steps: the signature is verified and the
// answer encoded; a wrong signature is refused with 401.
const signedStep = `
import json, sys, time
import gendurable
secret = gendurable.new_secret()
steps = gendurable.Steps(secret)
steps.register("greeter", lambda step: gendurable.Done(result={"hello": step.job.input["name"]}))
body = json.dumps({"job": {"id": 1, "queue": "default", "handler": "greeter", "step": 0, "attempt": 1,
                   "input": {"name": "Ada"}, "state": {}, "created_at": "2026-01-01T00:00:00Z"},
                   "signals": [], "children": [], "lease": {"token": "t", "expires_at": "2026-01-01T00:00:30Z"}}).encode()
headers = gendurable.sign_headers(secret, "job_1_step_0_attempt_1", int(time.time()), body)
ok = steps.handle(headers, body)
bad = steps.handle(gendurable.sign_headers(gendurable.new_secret(), "job_1_step_0_attempt_1", int(time.time()), body), body)
print(gendurable.__file__)
print(ok.status, json.loads(ok.body), bad.status)
`

// pip installs the SDK from a clone as it is, offline: the pip block of the README, run as
// written in a fresh venv with --no-index on a copy of the files git tracks here, and then
// the README's greeter and client with that venv's python (no PYTHONPATH) against the real
// server. Before the in-tree backend pip could not build it without PyPI (setuptools in
// the isolated build environment, and no wheel module). Then the same clone installed
// editable (PEP 660: gendurable imports from the clone), and the sdist the backend builds,
// installed with --no-index in a third venv: each imports and verifies a signed step.
func TestPipInstallFromAClone(t *testing.T) {
	t.Parallel()
	py := python3(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	srv := gendurabletest.Start(t, pgtest.NewDatabase(t))
	clone := cloneSDK(t)
	sdk := filepath.Join(clone, "sdk", "python")
	venv(t, ctx, py, filepath.Join(t.TempDir(), "probe")) // skips early without ensurepip

	// The README's pip block, as written, then its greeter and client.
	work := t.TempDir()
	install := strings.ReplaceAll(readmeBlock(t, "install-pip"), "/path/to/gendurable", clone)
	if out := runPy(t, ctx, work, "bash", "-euo", "pipefail", "-c", install); !strings.Contains(out, "<class 'gendurable.client.Client'>") {
		t.Fatalf("the pip block printed:\n%s", out)
	}
	installed := filepath.Join(work, ".venv", "bin", "python3")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	replace := strings.NewReplacer("http://localhost:8080", srv.URL, "9092", port)
	for name, block := range map[string]string{"greeter.py": "greeter", "client.py": "client", "signed.py": ""} {
		code := signedStep
		if block != "" {
			code = replace.Replace(readmeBlock(t, block))
		}
		if err := os.WriteFile(filepath.Join(work, name), []byte(code), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	greeter := exec.CommandContext(ctx, installed, "greeter.py")
	greeter.Dir, greeter.Env = work, pythonEnv()
	if err := greeter.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = greeter.Process.Kill(); _ = greeter.Wait() })
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.Dial("tcp", "127.0.0.1:"+port)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the installed greeter did not listen on %s", port)
		}
		time.Sleep(50 * time.Millisecond) // polling for the port, with a deadline
	}
	out := runPy(t, ctx, work, installed, "client.py")
	for _, want := range []string{"{'greeting': 'hello, Ada'}", "['next', 'next', 'done']"} {
		if !strings.Contains(out, want) {
			t.Errorf("the client with the installed package printed no %s:\n%s\nserver log:\n%s", want, out, srv.Logs())
		}
	}
	checkSigned := func(python, wantUnder string) {
		t.Helper()
		out := runPy(t, ctx, work, python, "signed.py")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], wantUnder+string(filepath.Separator)) ||
			lines[1] != "200 {'done': {'result': {'hello': 'Ada'}}} 401" {
			t.Errorf("a signed step with %s (gendurable wanted under %s):\n%s", python, wantUnder, out)
		}
	}
	checkSigned(installed, filepath.Join(work, ".venv"))

	// Editable: the venv imports gendurable from the clone itself.
	editable := venv(t, ctx, py, filepath.Join(t.TempDir(), "editable"))
	runPy(t, ctx, work, editable, "-m", "pip", "install", "--no-index", "-e", sdk)
	checkSigned(editable, filepath.Join(sdk, "gendurable"))

	// The sdist, built by the backend as a frontend calls it, installs offline too (pip
	// builds its wheel again from what the sdist carries).
	dist := t.TempDir()
	name := strings.TrimSpace(runPy(t, ctx, sdk, py, "-c",
		"import sys; sys.path.insert(0, 'build_backend'); import gendurable_build as b; print(b.build_sdist(sys.argv[1]))", dist))
	if name != "gendurable-0.1.0.tar.gz" {
		t.Fatalf("build_sdist answered %q", name)
	}
	fromSdist := venv(t, ctx, py, filepath.Join(t.TempDir(), "sdist"))
	runPy(t, ctx, work, fromSdist, "-m", "pip", "install", "--no-index", filepath.Join(dist, name))
	checkSigned(fromSdist, filepath.Dir(filepath.Dir(fromSdist)))
}
