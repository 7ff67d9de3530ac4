// Package python_test runs the Python SDK's unittest suites (and examples/python-lambda's)
// against the real server, so that `go test ./...` (what CI runs) covers them.
package python_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

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
