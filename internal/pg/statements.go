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

var nameLine = regexp.MustCompile(`(?m)^-- (name|fragment): (\w+)\s*$`)

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
	// The crediting variant of the outcome statement: fragment GateCredit at its marker.
	const marker = "-- @gate-credit"
	base := out["JobApplyOutcomes"]
	at := strings.Index(base, marker)
	if at < 0 || fragments["GateCredit"] == "" {
		panic("pg: outcome.sql lacks its gate-credit marker or fragment")
	}
	eol := at + strings.Index(base[at:], "\n") + 1
	out["JobApplyOutcomesCrediting"] = strings.Replace(base[:at]+fragments["GateCredit"]+"\n"+base[eol:],
		"-- name: JobApplyOutcomes\n", "-- name: JobApplyOutcomesCrediting\n", 1)
	out["JobApplyOutcomes"] = base[:at] + base[eol:]
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
