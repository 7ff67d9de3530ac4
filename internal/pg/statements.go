package pg

import (
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// statements maps a statement name ("-- name: X" in sql/*.sql) to its SQL text.
var statements = loadStatements(sqlFiles)

var (
	nameLine   = regexp.MustCompile(`(?m)^-- (name|fragment): (\w+)\s*$`)
	markerLine = regexp.MustCompile(`(?m)^-- @(\w+).*\n`)
)

// fragments are named pieces of SQL ("-- fragment: X") spliced into statements at a
// "-- @marker" line; they are not statements of their own.
var fragments = map[string]string{}

func loadStatements(fsys fs.FS) map[string]string {
	out := map[string]string{}
	files, err := fs.Glob(fsys, "sql/*.sql")
	if err != nil {
		panic(err)
	}
	for _, f := range files {
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			panic(err)
		}
		text := string(b)
		idx := nameLine.FindAllStringSubmatchIndex(text, -1)
		for i, m := range idx {
			end := len(text)
			if i+1 < len(idx) {
				end = idx[i+1][0]
			}
			kind, name := text[m[2]:m[3]], text[m[4]:m[5]]
			body := strings.TrimSpace(text[m[0]:end])
			if kind == "fragment" {
				fragments[name] = strings.TrimSpace(strings.TrimPrefix(body, text[m[0]:m[1]]))
				continue
			}
			if _, dup := out[name]; dup {
				panic(fmt.Sprintf("pg: statement %s defined twice", name))
			}
			out[name] = body
		}
	}
	// Fragments are spliced in at their "-- @Name" marker lines. The outcome statement's
	// GateCredit marker makes two statements: JobApplyOutcomes without the credit and
	// JobApplyOutcomesCrediting with it.
	base := out["JobApplyOutcomes"]
	if !strings.Contains(base, "-- @GateCredit") {
		panic("pg: outcome.sql lacks its -- @GateCredit marker")
	}
	out["JobApplyOutcomesCrediting"] = strings.Replace(base, "-- name: JobApplyOutcomes\n", "-- name: JobApplyOutcomesCrediting\n", 1)
	out["JobApplyOutcomes"] = markerLine.ReplaceAllStringFunc(base, func(m string) string {
		if strings.HasPrefix(strings.TrimSpace(m), "-- @GateCredit") {
			return ""
		}
		return m
	})
	for name, sql := range out {
		out[name] = markerLine.ReplaceAllStringFunc(sql, func(m string) string {
			frag := markerLine.FindStringSubmatch(m)[1]
			text, ok := fragments[frag]
			if !ok {
				panic(fmt.Sprintf("pg: statement %s names fragment %s, which no sql file defines", name, frag))
			}
			return text + "\n"
		})
	}
	return out
}

// stmt returns the SQL of a named statement and panics on a typo (caught by any test).
func stmt(name string) string {
	s, ok := statements[name]
	if !ok {
		panic("pg: no statement named " + name)
	}
	return s
}

// Statement returns the SQL text of a named statement, for tests that EXPLAIN it.
func Statement(name string) string { return stmt(name) }
