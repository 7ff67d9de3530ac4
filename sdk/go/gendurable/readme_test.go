package gendurable_test

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

// readmeBlock answers the code block that follows <!-- readme:name --> in sdk/go/README.md.
func readmeBlock(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "<!-- readme:"+name+" -->\n```")
	if !ok {
		t.Fatalf("sdk/go/README.md has no <!-- readme:%s --> block", name)
	}
	_, rest, _ = strings.Cut(rest, "\n") // the fence's language
	code, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatalf("sdk/go/README.md: the %s block is not closed", name)
	}
	return code
}

// The README as written: its install block makes a project that points at a copy of the
// files git tracks (what a clone has), and its quickstart, saved as main.go there, runs
// with the README's command against the real server and prints what it says it prints.
func TestReadme(t *testing.T) {
	t.Parallel()
	srv := gendurabletest.Start(t, pgtest.NewDatabase(t))
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	ls := exec.Command("git", "ls-files", "-z")
	ls.Dir = root
	files, err := ls.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	clone := t.TempDir()
	for _, name := range strings.Split(strings.TrimRight(string(files), "\x00"), "\x00") {
		b, err := os.ReadFile(filepath.Join(root, name))
		if os.IsNotExist(err) {
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		to := filepath.Join(clone, name)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	replace := strings.NewReplacer("/path/to/gendurable", clone, "http://localhost:8080", srv.URL, "9093", port)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go.txt"), []byte(replace.Replace(readmeBlock(t, "quickstart"))), 0o644); err != nil {
		t.Fatal(err)
	}
	script := replace.Replace(readmeBlock(t, "install")) + "mv ../main.go.txt main.go\n" + readmeBlock(t, "run")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's blocks: %v\n%s\n--- output:\n%s\nserver log:\n%s", err, script, out, srv.Logs())
	}
	if !strings.Contains(string(out), `done {"greeting":"hello, Ada"}`) {
		t.Fatalf("the quickstart printed no %s:\n%s", `done {"greeting":"hello, Ada"}`, out)
	}
}
