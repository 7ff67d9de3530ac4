package pg_test

// Some statements share parts, written out in each of them: the parent join (CTE
// `joined`), the gate credit (CTE `credited`), and the whole outcome statement, of which
// JobApplyOutcomesCrediting is a copy plus the credit. They are copies rather than
// fragments assembled by a template on purpose: sqlc reads sql/*.sql as written, so a
// template would put a generator (and a second generated artefact to keep fresh) in
// front of sqlc, and the .sql files, the text the plan tests EXPLAIN and a reader opens
// in psql, would become build output. A few shared parts in a few statements do not pay
// for that. The price of copies is drift, and this test is what keeps them in step: it
// splits each statement into its CTEs (comments dropped, whitespace collapsed) and fails
// when a copy differs from the others, when a statement gains a copy the table below
// does not list, or when the variant differs from its plain statement by anything but
// its extra CTE.

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gendurable/gendurable/internal/pg"
)

// sharedCTEs lists, for each shared CTE, the statements that hold a copy of it, and the
// CTEs of its host that it reads (a copy silently depends on them).
var sharedCTEs = []struct {
	name    string
	holders []string
	reads   []string
}{
	{"joined", []string{"JobApplyOutcomes", "JobApplyOutcomesCrediting", "JobApplyPlainOutcomes", "JobCancel", "JobCancelMany", "JobReapExpiredLeases"}, []string{"updated"}},
	{"credited", []string{"JobApplyOutcomesCrediting", "JobReapExpiredLeases", "LeaseParkMany", "LeaseReleaseMany"}, []string{"updated", "before"}},
	{"retried", []string{"JobRetry", "JobRetryMany"}, []string{"target"}},
}

// statementVariants are statements that are another one plus some CTEs.
var statementVariants = []struct {
	plain, variant string
	extra          []string
}{
	{"JobApplyOutcomes", "JobApplyOutcomesCrediting", []string{"credited"}},
}

// parsedStatement is a statement split into its CTEs, in order, and its final query.
type parsedStatement struct {
	names []string
	ctes  map[string]string
	final string
}

// normalizeSQL drops -- comments and collapses whitespace, leaving string literals
// as they are.
func normalizeSQL(sql string) string {
	var b strings.Builder
	space := false
	for i := 0; i < len(sql); i++ {
		c := sql[i]
		switch {
		case c == '\'':
			j := i + 1
			for j < len(sql) && (sql[j] != '\'' || j+1 < len(sql) && sql[j+1] == '\'') {
				if sql[j] == '\'' {
					j++ // a doubled quote
				}
				j++
			}
			if space && b.Len() > 0 {
				b.WriteByte(' ')
			}
			space = false
			b.WriteString(sql[i:min(j+1, len(sql))])
			i = j
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			for i < len(sql) && sql[i] != '\n' {
				i++
			}
			space = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			space = true
		default:
			if space && b.Len() > 0 {
				b.WriteByte(' ')
			}
			space = false
			b.WriteByte(c)
		}
	}
	return b.String()
}

// closingParen is the index of the parenthesis that closes the one at open in s (a
// normalised statement), skipping string literals; -1 when there is none.
func closingParen(s string, open int) int {
	depth, quoted := 0, false
	for i := open; i < len(s); i++ {
		switch {
		case s[i] == '\'':
			quoted = !quoted // a doubled quote toggles twice
		case quoted:
		case s[i] == '(':
			depth++
		case s[i] == ')':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// parseStatement splits sql into its CTEs and final query; a statement without WITH is
// all final query.
func parseStatement(sql string) (parsedStatement, error) {
	s := normalizeSQL(sql)
	p := parsedStatement{ctes: map[string]string{}}
	rest, ok := strings.CutPrefix(s, "WITH ")
	if !ok {
		p.final = s
		return p, nil
	}
	rest = strings.TrimPrefix(rest, "RECURSIVE ")
	for {
		head, _, ok := strings.Cut(rest, " AS (")
		name := head
		if columns, listed := strings.CutSuffix(head, ")"); listed { // name(column, …)
			name, _, _ = strings.Cut(columns, "(")
		}
		if !ok || name == "" || strings.ContainsAny(name, " (),") {
			return p, fmt.Errorf("expected `name AS (` or `name(columns) AS (` at %.40q", rest)
		}
		open := len(head) + len(" AS ")
		end := closingParen(rest, open)
		if end < 0 {
			return p, fmt.Errorf("CTE %s is not closed", name)
		}
		if _, dup := p.ctes[name]; dup {
			return p, fmt.Errorf("CTE %s is defined twice", name)
		}
		p.names = append(p.names, name)
		p.ctes[name] = strings.TrimSpace(rest[open+1 : end])
		rest = strings.TrimSpace(rest[end+1:])
		next, more := strings.CutPrefix(rest, ",")
		if !more {
			p.final = rest
			return p, nil
		}
		rest = strings.TrimSpace(next)
	}
}

// firstDifference shows where a and b part, for a failure message.
func firstDifference(a, b string) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	from := max(i-30, 0)
	return fmt.Sprintf("…%s… against …%s…", a[from:min(i+40, len(a))], b[from:min(i+40, len(b))])
}

// copyDrift lists how the copies among statements (name → SQL) disagree.
func copyDrift(statements map[string]string) []string {
	var problems []string
	parsed := map[string]parsedStatement{}
	for name, sql := range statements {
		p, err := parseStatement(sql)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		parsed[name] = p
	}
	for _, shared := range sharedCTEs {
		var want, from string
		for _, holder := range shared.holders {
			p, ok := parsed[holder]
			body, has := p.ctes[shared.name]
			if !ok || !has {
				problems = append(problems, fmt.Sprintf("%s: no CTE %s (listed as a holder of a copy)", holder, shared.name))
				continue
			}
			for _, dep := range shared.reads {
				if _, ok := p.ctes[dep]; !ok {
					problems = append(problems, fmt.Sprintf("%s: its copy of %s reads a CTE %s it does not define", holder, shared.name, dep))
				}
			}
			if from == "" {
				want, from = body, holder
			} else if body != want {
				problems = append(problems, fmt.Sprintf("%s: its copy of %s differs from %s's: %s", holder, shared.name, from, firstDifference(body, want)))
			}
		}
		for name, p := range parsed {
			if _, has := p.ctes[shared.name]; has && !slices.Contains(shared.holders, name) {
				problems = append(problems, fmt.Sprintf("%s: defines CTE %s but is not listed as holding a copy of it", name, shared.name))
			}
		}
	}
	for _, v := range statementVariants {
		plain, variant := parsed[v.plain], parsed[v.variant]
		rest := slices.DeleteFunc(slices.Clone(variant.names), func(n string) bool { return slices.Contains(v.extra, n) })
		if !slices.Equal(rest, plain.names) {
			problems = append(problems, fmt.Sprintf("%s: CTEs %v, but %s plus %v has %v", v.variant, variant.names, v.plain, v.extra, plain.names))
			continue
		}
		for _, n := range plain.names {
			if plain.ctes[n] != variant.ctes[n] {
				problems = append(problems, fmt.Sprintf("%s: CTE %s differs from %s's: %s", v.variant, n, v.plain, firstDifference(variant.ctes[n], plain.ctes[n])))
			}
		}
		if plain.final != variant.final {
			problems = append(problems, fmt.Sprintf("%s: the final query differs from %s's: %s", v.variant, v.plain, firstDifference(variant.final, plain.final)))
		}
	}
	slices.Sort(problems)
	return problems
}

func allStatements() map[string]string {
	out := map[string]string{}
	for _, name := range pg.StatementNames() {
		out[name] = pg.Statement(name)
	}
	return out
}

// Every written-out copy agrees with the others.
func TestStatementCopiesAgree(t *testing.T) {
	t.Parallel()
	for _, p := range copyDrift(allStatements()) {
		t.Error(p)
	}
}

// The check catches drift: a copy changed in one place, a variant changed outside its
// extra CTE, a copy removed from a listed holder, a new unlisted copy.
func TestStatementCopiesDriftIsCaught(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, statement, old, new string
		want                      string // a substring of the problem reported
	}{
		{"the parent join edited in one copy", "JobCancel", "p.pending_children - d.n", "p.pending_children - 1",
			"JobCancel: its copy of joined differs"},
		{"the credit edited in one copy", "LeaseReleaseMany", "least(s.cap, s.available + d.n)", "s.available + d.n",
			"LeaseReleaseMany: its copy of credited differs"},
		{"the variant's update edited", "JobApplyOutcomesCrediting", "lease_owner = NULL,", "",
			"JobApplyOutcomesCrediting: CTE updated differs"},
		{"the variant's answer edited", "JobApplyOutcomesCrediting", "u.eligible_at <= now(), false)::bool AS ready", "true, false)::bool AS ready",
			"JobApplyOutcomesCrediting: the final query differs"},
		{"a holder renames its copy", "JobReapExpiredLeases", "joined AS (", "parent_joined AS (",
			"JobReapExpiredLeases: no CTE joined"},
		{"a new copy in an unlisted statement", "JobWakeExpiredAwaits", "notified AS (", "credited AS (",
			"JobWakeExpiredAwaits: defines CTE credited but is not listed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			stmts := allStatements()
			if !strings.Contains(stmts[c.statement], c.old) {
				t.Fatalf("%s no longer contains %q: update this case", c.statement, c.old)
			}
			stmts[c.statement] = strings.Replace(stmts[c.statement], c.old, c.new, 1)
			problems := copyDrift(stmts)
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, c.want) }) {
				t.Fatalf("want a problem containing %q, got %q", c.want, problems)
			}
		})
	}
}

// The splitter reads a statement as the database would: comments are not code, and a
// parenthesis or a `--` inside a string literal is text.
func TestParseStatementSplitsCTEs(t *testing.T) {
	t.Parallel()
	p, err := parseStatement(`-- name: X :many
-- a comment (with a paren
WITH RECURSIVE a AS (
    SELECT '(', 'it''s -- not a comment' -- a comment )
), b AS (SELECT (1 + (2)) FROM a)
SELECT * FROM b;`)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.names, []string{"a", "b"}) || p.ctes["a"] != `SELECT '(', 'it''s -- not a comment'` ||
		p.ctes["b"] != "SELECT (1 + (2)) FROM a" || p.final != "SELECT * FROM b;" {
		t.Fatalf("parsed %q %q %q", p.names, p.ctes, p.final)
	}
	if _, err := parseStatement("WITH a AS (SELECT 1"); err == nil {
		t.Fatal("an unclosed CTE parsed")
	}
}
