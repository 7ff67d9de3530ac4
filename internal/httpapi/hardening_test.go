package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/httpapi"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// tables are the tables a refused request must leave alone.
var tables = []string{"jobs", "signals", "steps", "handlers", "queues", "rate_limits", "rate_buckets", "gates",
	"gate_slots", "api_keys", "fairness_keys"}

// rowCounts counts the rows of every table.
func (a *api) rowCounts() map[string]int64 {
	a.t.Helper()
	out := map[string]int64{}
	for _, table := range tables {
		out[table] = a.count(table)
	}
	return out
}

// refusal is a bad request and the problem it must get.
type refusal struct {
	name, method, path, body string
	status                   int
	field                    string // "" when the problem names no field
}

// expectRefusals sends each request and checks its problem document and that nothing
// was written.
func (a *api) expectRefusals(cases []refusal) {
	a.t.Helper()
	t := a.t
	before := a.rowCounts()
	for _, c := range cases {
		r := a.do(c.method, c.path, c.body)
		if r.status != c.status {
			t.Errorf("%s: status %d, want %d: %s", c.name, r.status, c.status, r.body)
			continue
		}
		if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("%s: content type %q", c.name, ct)
			continue
		}
		p := r.json(t)
		if p["type"] == nil || p["title"] == nil || p["status"] != float64(c.status) {
			t.Errorf("%s: not a problem document: %s", c.name, r.body)
		}
		if strings.Contains(string(r.body), "SQLSTATE") {
			t.Errorf("%s: the problem shows the database's error text: %s", c.name, r.body)
		}
		if c.field == "" {
			continue
		}
		found := false
		errs, _ := p["errors"].([]any)
		for _, e := range errs {
			if e.(map[string]any)["field"] == c.field {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: the problem does not name field %q: %s", c.name, c.field, r.body)
		}
	}
	after := a.rowCounts()
	for table, n := range before {
		if after[table] != n {
			t.Errorf("refused requests changed %s: %d rows, then %d", table, n, after[table])
		}
	}
}

// Text PostgreSQL cannot store (NUL, a lone surrogate, bytes that are not UTF-8) is a
// 422 naming the field, anywhere a request carries text, and writes nothing.
func TestUnstorableTextIsRefused(t *testing.T) {
	t.Parallel()
	a := newAPI(t, httpapi.Config{})
	a.registerHandler("h")
	r := a.do("POST", "/v1/jobs", `{"handler": "h", "key": "target"}`)
	if r.status != 201 {
		t.Fatalf("insert: %d %s", r.status, r.body)
	}
	id := int64(r.json(t)["id"].(float64))
	sig := fmt.Sprintf("/v1/jobs/%d/signals", id)
	token := "0b6f2b5e-4a59-4b8e-9a0c-3f1d2e4c5a6b"
	a.expectRefusals([]refusal{
		{"NUL in key", "POST", "/v1/jobs", `{"handler": "h", "key": "a\u0000b"}`, 422, "key"},
		{"NUL in an input string", "POST", "/v1/jobs", `{"handler": "h", "input": {"a": ["ok", "x\u0000"]}}`, 422, "input/a/1"},
		{"NUL in an input member name", "POST", "/v1/jobs", `{"handler": "h", "input": {"k\u0000": 1}}`, 422, "input"},
		{"NUL as the whole input", "POST", "/v1/jobs", `{"handler": "h", "input": "\u0000"}`, 422, "input"},
		{"NUL in concurrency_key", "POST", "/v1/jobs", `{"handler": "h", "concurrency_key": "\u0000"}`, 422, "concurrency_key"},
		{"NUL in rate_limit key", "POST", "/v1/jobs", `{"handler": "h", "rate_limit": {"name": "r", "key": "\u0000"}}`, 422, "rate_limit/key"},
		{"NUL in a batch key", "POST", "/v1/jobs/batch", `{"jobs": [{"handler": "h"}, {"handler": "h", "key": "\u0000"}]}`, 422, "jobs/1/key"},
		{"NUL in a handler name", "POST", "/v1/jobs", `{"handler": "h\u0000"}`, 422, "handler"},
		{"NUL in a signal name", "POST", sig, `{"name": "go\u0000"}`, 422, "name"},
		{"NUL in a signal payload", "POST", sig, `{"name": "go", "payload": {"x": "\u0000"}}`, 422, "payload/x"},
		{"NUL in a signal key", "POST", "/v1/signals", `{"key": "target\u0000", "name": "go"}`, 422, "key"},
		{"NUL in a signal-by-key payload", "POST", "/v1/signals", `{"key": "target", "name": "go", "payload": "\u0000"}`, 422, "payload"},
		{"NUL in an API key name", "POST", "/v1/api-keys", `{"name": "ci\u0000", "scope": "read"}`, 422, "name"},
		{"NUL in a query parameter", "GET", "/v1/jobs?key=a%00b", ``, 422, "query/key"},
		{"non-UTF-8 query parameter", "GET", "/v1/jobs?key=a%ffb", ``, 422, "query/key"},
		{"NUL in a gate key", "PUT", "/v1/gates/a%00b", `{"limit": 2}`, 422, "path/key"},
		{"NUL in a handler path name", "PUT", "/v1/handlers/a%00b", `{"url": "http://93.184.215.14/"}`, 422, "path/name"},
		{"NUL in a queue path name", "PUT", "/v1/queues/q%00", `{"paused": true}`, 422, "path/name"},
		{"NUL in a rate limit path name", "PUT", "/v1/rate-limits/r%00", `{"rate": 1, "burst": 1}`, 422, "path/name"},
		{"NUL in an outcome's state", "POST", fmt.Sprintf("/v1/jobs/%d/outcome", id),
			`{"token": "` + token + `", "next": {"state": {"s": "\u0000"}}}`, 422, "next/state/s"},
		{"NUL in an outcome's error", "POST", fmt.Sprintf("/v1/jobs/%d/outcome", id),
			`{"token": "` + token + `", "fail": {"error": "\u0000"}}`, 422, "fail/error"},
		{"NUL in a heartbeat token", "POST", fmt.Sprintf("/v1/jobs/%d/heartbeat", id), `{"token": "\u0000"}`, 422, "token"},
		{"lone high surrogate in input", "POST", "/v1/jobs", `{"handler": "h", "input": "\ud800"}`, 422, "body"},
		{"lone low surrogate in a payload", "POST", sig, `{"name": "go", "payload": ["\udc00"]}`, 422, "body"},
		{"body not UTF-8", "POST", "/v1/jobs", "{\"handler\": \"h\", \"input\": \"\xff\xfe\"}", 400, ""},
	})
	// An escaped backslash before u0000 is plain text, and a surrogate pair is one
	// character: both are stored.
	if r := a.do("POST", "/v1/jobs", `{"handler": "h", "input": {"path": "C:\\u0000", "emoji": "\ud83d\ude00"}}`); r.status != 201 {
		t.Fatalf("storable escapes were refused: %d %s", r.status, r.body)
	}
}

// Data after the JSON body is refused, not ignored.
func TestTrailingDataAfterTheBodyIsRefused(t *testing.T) {
	t.Parallel()
	a := newAPI(t, httpapi.Config{})
	a.registerHandler("h")
	a.expectRefusals([]refusal{
		{"two objects", "POST", "/v1/jobs", `{"handler": "h"}{"handler": "h"}`, 400, ""},
		{"an object and garbage", "POST", "/v1/jobs", `{"handler": "h"} x`, 400, ""},
		{"a batch and a second value", "POST", "/v1/jobs/batch", `{"jobs": [{"handler": "h"}]} []`, 400, ""},
		{"a signal and a number", "POST", "/v1/signals", `{"key": "k", "name": "n"} 1`, 400, ""},
	})
	if r := a.do("POST", "/v1/jobs", "{\"handler\": \"h\"} \n\t "); r.status != 201 {
		t.Fatalf("trailing whitespace was refused: %d %s", r.status, r.body)
	}
}

// A batch holding a live job's key and an unknown handler or rate limit is a 422 that
// names the item, not a 500.
func TestBatchWithALiveKeyAndAnUnknownNameIsRefused(t *testing.T) {
	t.Parallel()
	a := newAPI(t, httpapi.Config{})
	a.registerHandler("h")
	if r := a.do("PUT", "/v1/rate-limits/tight", `{"rate": 1, "burst": 2}`); r.status != 200 {
		t.Fatalf("rate limit: %d %s", r.status, r.body)
	}
	if r := a.do("POST", "/v1/jobs", `{"handler": "h", "key": "live"}`); r.status != 201 {
		t.Fatalf("insert: %d %s", r.status, r.body)
	}
	a.expectRefusals([]refusal{
		{"unknown handler", "POST", "/v1/jobs/batch", `{"jobs": [{"handler": "h", "key": "live"}, {"handler": "ghost"}]}`, 422, "jobs/1/handler"},
		{"unknown handler, keyed", "POST", "/v1/jobs/batch", `{"jobs": [{"handler": "h", "key": "live"}, {"handler": "ghost", "key": "new"}]}`, 422, "jobs/1/handler"},
		{"unknown rate limit", "POST", "/v1/jobs/batch", `{"jobs": [{"handler": "h", "rate_limit": {"name": "nope"}}, {"handler": "h", "key": "live"}]}`, 422, "jobs/0/rate_limit/name"},
		{"weight over burst", "POST", "/v1/jobs/batch", `{"jobs": [{"handler": "h", "key": "live"}, {"handler": "h", "rate_limit": {"name": "tight", "weight": 3}}]}`, 422, "jobs/1/rate_limit/weight"},
	})
}

// Durations too long for the server are refused, not dropped.
func TestOverflowingDurationsAreRefused(t *testing.T) {
	t.Parallel()
	a := newAPI(t, httpapi.Config{})
	a.registerHandler("h")
	if r := a.do("PUT", "/v1/queues/kept", `{"retention": "24h"}`); r.status != 200 {
		t.Fatalf("queue: %d %s", r.status, r.body)
	}
	const huge = "9999999999h"
	a.expectRefusals([]refusal{
		{"delay", "POST", "/v1/jobs", `{"handler": "h", "delay": "` + huge + `"}`, 422, "delay"},
		{"delay in ns", "POST", "/v1/jobs", `{"handler": "h", "delay": "99999999999999999999ns"}`, 422, "delay"},
		{"batch delay", "POST", "/v1/jobs/batch", `{"jobs": [{"handler": "h"}, {"handler": "h", "delay": "` + huge + `"}]}`, 422, "jobs/1/delay"},
		{"queue retention", "PUT", "/v1/queues/kept", `{"retention": "` + huge + `"}`, 422, "retention"},
		{"new queue retention", "PUT", "/v1/queues/fresh", `{"retention": "` + huge + `"}`, 422, "retention"},
		{"handler timeout", "PUT", "/v1/handlers/h", `{"url": "http://93.184.215.14/", "timeout": "` + huge + `"}`, 422, "timeout"},
		{"handler backoff", "PUT", "/v1/handlers/h", `{"url": "http://93.184.215.14/", "backoff_max": "` + huge + `"}`, 422, "backoff_max"},
		{"rotation overlap", "POST", "/v1/handlers/h/rotate-secret", `{"overlap": "` + huge + `"}`, 422, "overlap"},
	})
	if q := a.do("GET", "/v1/queues/kept", "").json(t); q["retention"] != "24h0m0s" {
		t.Fatalf("the refused retention changed the queue: %v", q["retention"])
	}
	// The longest duration that fits is accepted and honoured.
	r := a.do("POST", "/v1/jobs", `{"handler": "h", "delay": "2562047h"}`)
	if r.status != 201 || !strings.HasPrefix(r.json(t)["eligible_at"].(string), "23") {
		t.Fatalf("the longest delay: %d %s", r.status, r.body)
	}
}

// Unknown /v1 routes and wrong methods answer problems, never the dashboard.
func TestUnknownRoutesAnswerProblems(t *testing.T) {
	t.Parallel()
	dashboard := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<!doctype html><title>dashboard</title>"))
	})
	for _, token := range []string{"", "tok"} {
		a := newAPI(t, httpapi.Config{Dashboard: dashboard, APIToken: token})
		for _, c := range []struct {
			method, path string
			status       int
			allow        string
		}{
			{"POST", "/v1/nope", 404, ""},
			{"GET", "/v1/nope/deeper", 404, ""},
			{"DELETE", "/v1/handlers/", 404, ""},
			{"GET", "/v1", 404, ""},
			{"GET", "/v1/", 404, ""},
			{"POST", "/v1/jobs/1", 405, "GET"},
			{"PATCH", "/v1/handlers/x", 405, "DELETE, GET, PUT"},
			{"DELETE", "/v1/jobs", 405, "GET, POST"},
			{"GET", "/v1/jobs/1/cancel", 405, "POST"},
			{"POST", "/healthz", 405, "GET"},
		} {
			r := a.do(c.method, c.path, "")
			if r.status != c.status || r.header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("token %q: %s %s: %d %s %.80s", token, c.method, c.path, r.status, r.header.Get("Content-Type"), r.body)
				continue
			}
			if got := r.header.Get("Allow"); got != c.allow {
				t.Errorf("token %q: %s %s: Allow %q, want %q", token, c.method, c.path, got, c.allow)
			}
		}
		if r := a.do("GET", "/runs/42", ""); r.status != 200 || !bytes.Contains(r.body, []byte("dashboard")) {
			t.Errorf("the dashboard no longer serves its routes: %d %s", r.status, r.body)
		}
	}
	a := newAPI(t, httpapi.Config{})
	if r := a.do("POST", "/v1/nope", ""); r.status != 404 || r.header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("without a dashboard: %d %s", r.status, r.body)
	}
	if r := a.do("PATCH", "/v1/queues/q", ""); r.status != 405 || r.header.Get("Allow") != "GET, PUT" {
		t.Errorf("without a dashboard, wrong method: %d %v", r.status, r.header)
	}
}

// syncBuffer is a bytes.Buffer that a server's goroutines may log to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A database that fails while an API key is checked is a logged 503, not a 401 that
// sends the client to fix a key that is fine.
func TestAPIKeyCheckDuringADatabaseFailureIs503(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	eng, err := engine.New(db, engine.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	h, err := httpapi.New(eng, httpapi.Config{APIToken: "admin-token"}, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(conformance(t, h))
	t.Cleanup(srv.Close)
	a := &api{t: t, url: srv.URL, db: db, eng: eng, token: "admin-token"}
	r := a.do("POST", "/v1/api-keys", `{"name": "reader", "scope": "read"}`)
	if r.status != 201 {
		t.Fatalf("create key: %d %s", r.status, r.body)
	}
	a.token = r.json(t)["key"].(string)
	if r := a.do("GET", "/v1/jobs", ""); r.status != 200 {
		t.Fatalf("the key works: %d %s", r.status, r.body)
	}
	a.token = "gdk_not-a-key-anyone-has"
	if r := a.do("GET", "/v1/jobs", ""); r.status != 401 {
		t.Fatalf("an unknown key: %d %s", r.status, r.body)
	}
	// The key lookup now fails (the table is gone); a fresh key is not in the cache.
	if _, err := db.Exec(context.Background(), `ALTER TABLE api_keys RENAME TO api_keys_gone`); err != nil {
		t.Fatal(err)
	}
	a.token = "gdk_another-key-not-cached"
	r = a.do("GET", "/v1/jobs", "")
	if r.status != 503 || r.header.Get("Content-Type") != "application/problem+json" || r.header.Get("WWW-Authenticate") != "" {
		t.Fatalf("a failing key lookup: %d %v %s", r.status, r.header, r.body)
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "api_keys") {
		t.Fatalf("the failure was not logged as an error:\n%s", logs.String())
	}
}
