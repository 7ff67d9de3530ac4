package httpapi_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
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
