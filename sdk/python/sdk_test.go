// Package python_test runs the Python SDK's unittest suites (and examples/python-lambda's)
// against the real server, so that `go test ./...` (what CI runs) covers them.
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

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// python3 answers the interpreter, skipping the test when it is absent outside CI (CI
// must have it: there its absence fails the test).
func python3(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "" {
			t.Skip("python3 is not installed (CI=true makes this a failure)")
		}
		t.Fatal("python3 is not installed and CI is set")
	}
	return path
}

// unittest runs `python3 -m unittest discover` in dir against a fresh server and database,
// failing with the suite's output. It fails too when tests were skipped (a suite skips
// only when it has no server).
func unittest(t *testing.T, dir string) {
	t.Helper()
	py := python3(t)
	srv := gendurabletest.Start(t, pgtest.NewDatabase(t))
	sdk, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "-m", "unittest", "discover", "-v", "-s", ".", "-p", "test_*.py")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GENDURABLE_URL="+srv.URL, "PYTHONDONTWRITEBYTECODE=1",
		"PYTHONPATH="+sdk+string(os.PathListSeparator)+filepath.Join(sdk, "tests"))
	if pgtest.Citus() { // the suites check what Citus refuses instead of what it does not offer
		cmd.Env = append(cmd.Env, "GENDURABLE_TEST_ON_CITUS=1")
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest in %s: %v\n%s\nserver log:\n%s", dir, err, out, srv.Logs())
	}
	if strings.Contains(string(out), "skipped") {
		t.Fatalf("tests were skipped:\n%s", out)
	}
	t.Logf("%s", out)
}

func TestPythonSDK(t *testing.T) {
	t.Parallel()
	unittest(t, "tests")
}

func TestPythonLambdaExample(t *testing.T) {
	t.Parallel()
	unittest(t, "../../examples/python-lambda")
}

// readmeBlock answers the code block that follows <!-- readme:name --> in README.md.
func readmeBlock(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "<!-- readme:"+name+" -->\n```")
	if !ok {
		t.Fatalf("README.md has no <!-- readme:%s --> block", name)
	}
	_, rest, _ = strings.Cut(rest, "\n") // the fence's language
	code, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatalf("README.md: the %s block is not closed", name)
	}
	return code
}

// cloneSDK copies the files git tracks here to <dir>/sdk/python (what a fresh clone holds,
// without __pycache__, build output or anything else left in this work tree) and answers dir.
func cloneSDK(t *testing.T) string {
	t.Helper()
	clone := t.TempDir()
	files, err := exec.Command("git", "ls-files", "-z", ".").Output()
	if err != nil {
		t.Fatalf("git ls-files (a test of what a clone holds needs git and a checkout): %v", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(files), "\x00"), "\x00") {
		b, err := os.ReadFile(name)
		if os.IsNotExist(err) {
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		to := filepath.Join(clone, "sdk", "python", name)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return clone
}

// This README as written: the PYTHONPATH install block on a copy of the files git
// tracks here (what a clone has), then the quickstart's greeter (served in the
// background, from the same shell) and its client, which must print what the README says.
func TestReadme(t *testing.T) {
	t.Parallel()
	python3(t)
	srv := gendurabletest.Start(t, pgtest.NewDatabase(t))
	clone := cloneSDK(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	replace := strings.NewReplacer("/path/to/gendurable", clone, "http://localhost:8080", srv.URL, "9092", port)
	dir := t.TempDir()
	for name, block := range map[string]string{"greeter.py": "greeter", "client.py": "client"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(replace.Replace(readmeBlock(t, block))), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	script := replace.Replace(readmeBlock(t, "install-path")) + `
python3 greeter.py & greeter=$!
trap 'kill $greeter' EXIT
for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/` + port + `) 2>/dev/null && break; sleep 0.1; done
python3 client.py
`
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's blocks: %v\n%s\n--- output:\n%s\nserver log:\n%s", err, script, out, srv.Logs())
	}
	for _, want := range []string{"<class 'gendurable.client.Client'>", "{'greeting': 'hello, Ada'}", "['next', 'next', 'done']"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the README's blocks printed no %s:\n%s", want, out)
		}
	}
}
