package httpapi_test

// Checks of the repository as a whole, beside TestSeamImports: how its tests wait, and
// what its CI script runs.

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestNoSleepThenAssert fails on a sleep that a test takes in its own flow, outside a
// loop (a poll) or a function literal (a handler taking its time): a sleep to let
// something happen, or to let time pass, before the test checks it. Wait on a condition
// (waitUntil, waitJob, a channel) or move a clock (ReaperConfig.Now, dispatch.Config.Now,
// engine.Config.IdempotencyClock, HistoryConfig.Now) instead (CONVENTIONS.md, Tests).
// It reads every Go test file of the module.
func TestNoSleepThenAssert(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	files := 0
	var found []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		files++
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Body != nil {
				for _, s := range flowSleeps(fn.Body.List) {
					rel, _ := filepath.Rel(root, fset.Position(s.Pos()).Filename)
					found = append(found, fmt.Sprintf("%s:%d in %s", rel, fset.Position(s.Pos()).Line, fn.Name.Name))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("read %d test files: the check would pass vacuously", files)
	}
	for _, f := range found {
		t.Errorf("%s sleeps in the test's flow: wait on a condition or move a clock instead", f)
	}
}

// flowSleeps are the sleeps among stmts and the blocks (if, else, plain) they hold, not
// within loops or function literals: time.Sleep(d) and <-time.After(d).
func flowSleeps(stmts []ast.Stmt) []ast.Stmt {
	var out []ast.Stmt
	for _, s := range stmts {
		switch s := s.(type) {
		case *ast.ExprStmt:
			x := s.X
			if u, ok := x.(*ast.UnaryExpr); ok && u.Op == token.ARROW {
				x = u.X
			}
			if c, ok := x.(*ast.CallExpr); ok {
				if sel, ok := c.Fun.(*ast.SelectorExpr); ok && (sel.Sel.Name == "Sleep" || sel.Sel.Name == "After") {
					if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "time" {
						out = append(out, s)
					}
				}
			}
		case *ast.BlockStmt:
			out = append(out, flowSleeps(s.List)...)
		case *ast.IfStmt:
			out = append(out, flowSleeps(s.Body.List)...)
			if s.Else != nil {
				out = append(out, flowSleeps([]ast.Stmt{s.Else})...)
			}
		}
	}
	return out
}

// TestCIRunsEveryStage runs .ci/run with stand-ins for make, go, npm, npx and apt-get
// (nothing is installed or built), the make target "test" failing: every stage after it
// must run still (a failing test stage hid the fuzz and chaos stages of a run), the
// summary at the end must give each stage's result, and the exit status must say that
// one failed.
func TestCIRunsEveryStage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script, err := os.ReadFile(filepath.Join("..", "..", ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, ".ci"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".ci", "run"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "make.log")
	for name, body := range map[string]string{
		"make":    `echo "$*" >> ` + log + `; [ "$1" != test ]`,
		"go":      `echo "go version (stand-in)"`,
		"apt-get": `true`,
		"npm":     `true`,
		"npx":     `true`,
	} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	citus := filepath.Join(dir, "citus") // a stand-in for the Citus installer .ci/run runs first
	if err := os.MkdirAll(citus, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(citus, "install.sh"), []byte("#!/bin/sh\ntrue\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", filepath.Join(dir, ".ci", "run"))
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "GENDURABLE_CITUS_DIR="+citus)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf(".ci/run exited 0 with a failing stage:\n%s", out)
	}
	ran, _ := os.ReadFile(log)
	targets := strings.Fields(string(ran))
	for _, want := range []string{"check-generated", "check-web", "lint-openapi", "lint", "test", "fuzz-short", "chaos-short"} {
		if !slices.Contains(targets, want) {
			t.Errorf("the stage make %s did not run (ran: %v)", want, targets)
		}
	}
	summary := string(out)
	if i := strings.LastIndex(summary, "--- summary"); i >= 0 {
		summary = summary[i:]
	} else {
		t.Fatalf("no summary at the end:\n%s", out)
	}
	for _, want := range []string{"make test", "make fuzz-short", "make chaos-short"} {
		if !strings.Contains(summary, want) {
			t.Errorf("the summary does not give the result of %s:\n%s", want, summary)
		}
	}
	if !strings.Contains(summary, "FAILED") || strings.Count(summary, "FAILED") != 1 {
		t.Errorf("the summary should show exactly one failed stage:\n%s", summary)
	}
}
