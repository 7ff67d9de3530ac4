package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/httpapi"
	"github.com/gendurable/gendurable/internal/netguard"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// fuzzTarget is the whole API on a real database, shared by the inputs of one fuzz
// target in one process, with a handler "h", a rate limit "r" and a live job keyed "k".
type fuzzTarget struct {
	url   string
	db    *pg.DB
	jobID int64
	fp    string
}

func newFuzzTarget(f *testing.F) *fuzzTarget {
	db := pgtest.NewDB(f)
	eng, err := engine.New(db, engine.Config{}, nil)
	if err != nil {
		f.Fatal(err)
	}
	h, err := httpapi.New(eng, httpapi.Config{MaxBodyBytes: 64 << 10, Guard: &netguard.Guard{AllowPrivate: true}}, nil)
	if err != nil {
		f.Fatal(err)
	}
	srv := httptest.NewServer(h)
	f.Cleanup(srv.Close)
	ft := &fuzzTarget{url: srv.URL, db: db}
	for _, req := range [][3]string{
		{"PUT", "/v1/handlers/h", `{"url": "http://93.184.215.14/steps"}`},
		{"PUT", "/v1/rate-limits/r", `{"rate": 5, "burst": 10}`},
		{"POST", "/v1/jobs", `{"handler": "h", "key": "k"}`},
	} {
		status, _, body := ft.send(req[0], req[1], []byte(req[2]))
		if status >= 300 {
			f.Fatalf("fixture %s %s: %d %s", req[0], req[1], status, body)
		}
		if req[1] == "/v1/jobs" {
			var j struct{ ID int64 }
			_ = json.Unmarshal(body, &j)
			ft.jobID = j.ID
		}
	}
	ft.fp = fingerprintSQL(f, db)
	return ft
}

func (ft *fuzzTarget) send(method, path string, body []byte) (int, http.Header, []byte) {
	req, err := http.NewRequest(method, ft.url+path, bytes.NewReader(body))
	if err != nil {
		panic(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func (ft *fuzzTarget) fingerprint(t *testing.T) string {
	rows, err := ft.db.QueryStrings(t.Context(), ft.fp)
	if err != nil || len(rows) != 1 {
		t.Fatalf("fingerprint: %v", err)
	}
	return rows[0][0]
}

// check sends body and asserts what every answer must hold: no 5xx, a problem document
// on a 4xx that wrote nothing, and a response that matches openapi.yaml.
func (ft *fuzzTarget) check(t *testing.T, method, path string, body []byte) {
	before := ft.fingerprint(t)
	status, header, answer := ft.send(method, path, body)
	if status >= 500 {
		t.Fatalf("%s %s %q: %d %s", method, path, body, status, answer)
	}
	probe := httptest.NewRequest(method, path, nil)
	if msg := responseMismatch(specRoutes(t), probe, status, header, answer); msg != "" {
		t.Fatalf("%s %s %q: %d does not match openapi.yaml: %s\n%s", method, path, body, status, msg, answer)
	}
	if status >= 400 {
		var p struct {
			Type, Title string
			Status      int
		}
		if header.Get("Content-Type") != "application/problem+json" || json.Unmarshal(answer, &p) != nil ||
			p.Type == "" || p.Title == "" || p.Status != status {
			t.Fatalf("%s %s %q: %d is not a problem document: %s", method, path, body, status, answer)
		}
		if after := ft.fingerprint(t); after != before {
			t.Fatalf("%s %s %q: the %d wrote (%s -> %s)", method, path, body, status, before, after)
		}
	}
}

// FuzzInsertJobRequest drives POST /v1/jobs and /v1/jobs/batch with arbitrary bodies
// through the whole stack (size limit, JSON and storability checks, kin-openapi, the
// handler, the engine, PostgreSQL). Seeds: testdata/fuzz/FuzzInsertJobRequest and below.
func FuzzInsertJobRequest(f *testing.F) {
	for _, seed := range []string{
		`{"handler": "h"}`,
		`{"handler": "h", "queue": "q", "input": {"a": [1, "b", null]}, "key": "k", "priority": 0, "delay": "30s",
			"concurrency_key": "c", "rate_limit": {"name": "r", "key": "x", "weight": 2}, "max_attempts": 3}`,
		`{"handler": "h", "run_at": "2030-01-01T00:00:00Z"}`,
		`{"handler": "h", "key": "a\u0000b"}`,
		`{"handler": "h", "input": "\ud800"}`,
		`{"handler": "h", "delay": "9999999999h"}`,
		`{"handler": "h", "priority": 1e300}`,
		`{"handler": "ghost", "key": "k"}`,
		`{"handler": "h"} {}`,
		`{"jobs": [{"handler": "h", "key": "k"}, {"handler": "ghost"}]}`,
		`{"jobs": [{"handler": "h"}, {"handler": "h", "rate_limit": {"name": "r", "weight": 11}}]}`,
		`{"jobs": []}`,
		`[`, `null`, ``,
	} {
		f.Add([]byte(seed), bytes.HasPrefix([]byte(seed), []byte(`{"jobs"`)))
	}
	ft := newFuzzTarget(f)
	f.Fuzz(func(t *testing.T, body []byte, batch bool) {
		path := "/v1/jobs"
		if batch {
			path = "/v1/jobs/batch"
		}
		ft.check(t, "POST", path, body)
	})
}

// FuzzSignalRequest drives POST /v1/jobs/{id}/signals and /v1/signals with arbitrary
// bodies (the live fixture job is keyed "k"). Seeds: testdata/fuzz/FuzzSignalRequest.
func FuzzSignalRequest(f *testing.F) {
	for _, seed := range []string{
		`{"name": "go"}`,
		`{"name": "go", "payload": {"x": [1, 2, {"y": null}]}}`,
		`{"key": "k", "name": "go", "payload": "p"}`,
		`{"key": "nobody", "name": "go"}`,
		`{"name": "go\u0000"}`,
		`{"name": "go", "payload": {"k\u0000": 1}}`,
		`{"name": "go", "payload": ["\udc00"]}`,
		`{"name": ""}`,
		`{"name": "go"}]`,
		`{"name": 7}`,
	} {
		f.Add([]byte(seed), bytes.Contains([]byte(seed), []byte(`"key"`)))
	}
	ft := newFuzzTarget(f)
	f.Fuzz(func(t *testing.T, body []byte, byKey bool) {
		path := fmt.Sprintf("/v1/jobs/%d/signals", ft.jobID)
		if byKey {
			path = "/v1/signals"
		}
		ft.check(t, "POST", path, body)
	})
}
