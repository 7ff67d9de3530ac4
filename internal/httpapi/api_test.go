package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/httpapi"
	"github.com/gendurable/gendurable/internal/netguard"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

type api struct {
	t   *testing.T
	url string
	db  *pg.DB
	// dbURL is the test's database, for a connection of its own.
	dbURL string
	eng   *engine.Engine
	// token is sent as a bearer token when set.
	token string
}

func newAPI(t *testing.T, cfg httpapi.Config) *api {
	t.Helper()
	return newAPIWith(t, cfg, pg.Options{})
}

// newAPIWith is newAPI on a database opened with opts (a statement counter, say).
func newAPIWith(t *testing.T, cfg httpapi.Config, opts pg.Options) *api {
	t.Helper()
	dbURL := pgtest.NewDatabase(t)
	db := pgtest.Open(t, dbURL, opts)
	eng, err := engine.New(db, engine.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Guard == nil {
		cfg.Guard = &netguard.Guard{AllowPrivate: true}
	}
	h, err := httpapi.New(eng, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(conformance(t, h))
	t.Cleanup(srv.Close)
	return &api{t: t, url: srv.URL, db: db, dbURL: dbURL, eng: eng, token: cfg.APIToken}
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("response is not a JSON object: %s", r.body)
	}
	return m
}

func (a *api) do(method, path, body string) reply {
	a.t.Helper()
	return a.doWith(method, path, body, nil)
}

// doWith is do with the request's extra headers.
func (a *api) doWith(method, path, body string, header http.Header) reply {
	a.t.Helper()
	req, err := http.NewRequest(method, a.url+path, strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

func (a *api) count(table string) int64 {
	a.t.Helper()
	n, err := a.db.QueryInt(context.Background(), "SELECT count(*) FROM "+table)
	if err != nil {
		a.t.Fatal(err)
	}
	return n
}

func (a *api) registerHandler(name string) {
	a.t.Helper()
	if r := a.do("PUT", "/v1/handlers/"+name, `{"url": "http://93.184.215.14/steps"}`); r.status != 200 {
		a.t.Fatalf("register handler: %d %s", r.status, r.body)
	}
}

// Every bad request answers a problem naming the field, and writes nothing.
func TestBadInputIsRefusedAndWritesNothing(t *testing.T) {
	t.Parallel()
	a := newAPI(t, httpapi.Config{MaxBodyBytes: 4096, MaxBatchBodyBytes: 1 << 20, Guard: &netguard.Guard{}})
	a.registerHandler("h")
	if r := a.do("PUT", "/v1/rate-limits/tight", `{"rate": 1, "burst": 2}`); r.status != 200 {
		t.Fatalf("rate limit: %d %s", r.status, r.body)
	}
	huge := `{"handler": "h", "input": "` + strings.Repeat("x", 5000) + `"}`
	bigBatch := `{"jobs": [` + strings.TrimSuffix(strings.Repeat(`{"handler": "h"},`, 10001), ",") + `]}`
	cases := []struct {
		name, method, path, body string
		status                   int
		field                    string // "" when the problem names no field
	}{
		{"malformed JSON", "POST", "/v1/jobs", `{"handler": "h", `, 400, ""},
		{"not an object", "POST", "/v1/jobs", `[1, 2]`, 422, "body"},
		{"handler of the wrong type", "POST", "/v1/jobs", `{"handler": 42}`, 422, "handler"},
		{"missing handler", "POST", "/v1/jobs", `{"queue": "q"}`, 422, "handler"},
		{"unknown handler", "POST", "/v1/jobs", `{"handler": "nobody"}`, 422, "handler"},
		{"priority above 9", "POST", "/v1/jobs", `{"handler": "h", "priority": 10}`, 422, "priority"},
		{"priority below 0", "POST", "/v1/jobs", `{"handler": "h", "priority": -1}`, 422, "priority"},
		{"priority not an integer", "POST", "/v1/jobs", `{"handler": "h", "priority": "high"}`, 422, "priority"},
		{"unknown field", "POST", "/v1/jobs", `{"handler": "h", "dealy": "5s"}`, 422, "dealy"},
		{"bad duration", "POST", "/v1/jobs", `{"handler": "h", "delay": "soon"}`, 422, "delay"},
		{"run_at and delay", "POST", "/v1/jobs", `{"handler": "h", "delay": "5s", "run_at": "2030-01-01T00:00:00Z"}`, 422, "delay"},
		{"bad queue name", "POST", "/v1/jobs", `{"handler": "h", "queue": "no spaces"}`, 422, "queue"},
		{"max_attempts zero", "POST", "/v1/jobs", `{"handler": "h", "max_attempts": 0}`, 422, "max_attempts"},
		{"body over the limit", "POST", "/v1/jobs", huge, 413, ""},
		{"batch job invalid", "POST", "/v1/jobs/batch", `{"jobs": [{"handler": "h"}, {"handler": "h", "priority": 99}]}`, 422, "jobs/1/priority"},
		{"batch with unknown handler", "POST", "/v1/jobs/batch", `{"jobs": [{"handler": "h"}, {"handler": "ghost"}]}`, 422, "jobs/1/handler"},
		{"batch empty", "POST", "/v1/jobs/batch", `{"jobs": []}`, 422, "jobs"},
		{"batch over 10 000", "POST", "/v1/jobs/batch", bigBatch, 422, "jobs"},
		{"handler URL file://", "PUT", "/v1/handlers/x", `{"url": "file:///etc/passwd"}`, 422, "url"},
		{"handler URL gopher", "PUT", "/v1/handlers/x", `{"url": "gopher://example.com/"}`, 422, "url"},
		{"handler URL with credentials", "PUT", "/v1/handlers/x", `{"url": "http://user:pw@example.com/"}`, 422, "url"},
		{"handler URL loopback", "PUT", "/v1/handlers/x", `{"url": "http://127.0.0.1:8080/"}`, 422, "url"},
		{"handler URL metadata", "PUT", "/v1/handlers/x", `{"url": "http://169.254.169.254/latest/meta-data"}`, 422, "url"},
		{"handler bad secret", "PUT", "/v1/handlers/x", `{"url": "http://93.184.215.14/", "secret": "hunter2"}`, 422, "secret"},
		{"handler bad timeout", "PUT", "/v1/handlers/x", `{"url": "http://93.184.215.14/", "timeout": "forever"}`, 422, "timeout"},
		{"handler bad name", "PUT", "/v1/handlers/bad%20name", `{"url": "http://93.184.215.14/"}`, 422, "path/name"},
		{"queue batch zero", "PUT", "/v1/queues/q", `{"batch": 0}`, 422, "batch"},
		{"queue step_bodies unknown", "PUT", "/v1/queues/q", `{"step_bodies": "some"}`, 422, "step_bodies"},
		{"list limit zero", "GET", "/v1/jobs?limit=0", ``, 422, "query/limit"},
		{"list bad status", "GET", "/v1/jobs?status=sleeping", ``, 422, "query/status"},
		{"job id not a number", "GET", "/v1/jobs/abc", ``, 422, "path/id"},
		{"signal without name", "POST", "/v1/jobs/1/signals", `{"payload": {}}`, 422, "name"},
		{"unknown rate limit", "POST", "/v1/jobs", `{"handler": "h", "rate_limit": {"name": "nope"}}`, 422, "rate_limit/name"},
		{"weight over burst", "POST", "/v1/jobs", `{"handler": "h", "rate_limit": {"name": "tight", "weight": 3}}`, 422, "rate_limit/weight"},
		{"batch weight over burst", "POST", "/v1/jobs/batch", `{"jobs": [{"handler": "h"}, {"handler": "h", "rate_limit": {"name": "tight", "weight": 9}}]}`, 422, "jobs/1/rate_limit/weight"},
		{"gate limit zero", "PUT", "/v1/gates/k", `{"limit": 0}`, 422, "limit"},
		{"gate shards 65", "PUT", "/v1/gates/k", `{"limit": 5, "shards": 65}`, 422, "shards"},
		{"rate limit burst below 1", "PUT", "/v1/rate-limits/r", `{"rate": 1, "burst": 0.5}`, 422, "burst"},
		{"rate limit negative rate", "PUT", "/v1/rate-limits/r", `{"rate": -1, "burst": 5}`, 422, "rate"},
	}
	for _, c := range cases {
		r := a.do(c.method, c.path, c.body)
		if r.status != c.status {
			t.Errorf("%s: status %d, want %d: %s", c.name, r.status, c.status, r.body)
			continue
		}
		if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("%s: content type %q", c.name, ct)
		}
		p := r.json(t)
		if p["type"] == nil || p["title"] == nil || p["status"] != float64(c.status) {
			t.Errorf("%s: not a problem document: %s", c.name, r.body)
		}
		if c.field != "" {
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
	}
	if n := a.count("jobs"); n != 0 {
		t.Fatalf("bad requests wrote %d jobs", n)
	}
	if n := a.count("handlers"); n != 1 {
		t.Fatalf("bad requests changed the handlers (%d rows)", n)
	}
	if n := a.count("queues"); n != 0 {
		t.Fatalf("bad requests created %d queues", n)
	}
	if n := a.count("gates") + a.count("rate_buckets"); n != 0 {
		t.Fatalf("bad requests created %d gates or buckets", n)
	}
	if n := a.count("rate_limits"); n != 1 {
		t.Fatalf("bad requests changed the rate limits (%d rows)", n)
	}
}

func TestInsertDedupBatchListAndGet(t *testing.T) {
	t.Parallel()
	a := newAPI(t, httpapi.Config{})
	a.registerHandler("h")
	r := a.do("POST", "/v1/jobs", `{"handler": "h", "key": "order-1", "input": {"n": 1}, "priority": 2}`)
	if r.status != 201 {
		t.Fatalf("insert: %d %s", r.status, r.body)
	}
	first := r.json(t)
	if first["deduplicated"] != false || first["status"] != "runnable" || first["priority"] != float64(2) || first["queue"] != "default" {
		t.Fatalf("insert answer %s", r.body)
	}
	for _, field := range []string{"id", "queue", "handler", "status", "priority", "eligible_at", "input", "state", "result",
		"error", "step", "attempt", "max_attempts", "key", "concurrency_key", "parent_id", "pending_children",
		"created_at", "updated_at", "finished_at", "deduplicated"} {
		if _, ok := first[field]; !ok {
			t.Errorf("the job lacks %q", field)
		}
	}
	r = a.do("POST", "/v1/jobs", `{"handler": "h", "key": "order-1", "input": {"n": 2}}`)
	again := r.json(t)
	if r.status != 200 || again["deduplicated"] != true || again["id"] != first["id"] {
		t.Fatalf("dedup: %d %s", r.status, r.body)
	}
	r = a.do("POST", "/v1/jobs/batch", `{"jobs": [{"handler": "h", "input": 1}, {"handler": "h", "key": "order-1"},
		{"handler": "h", "queue": "emails", "delay": "1h"}, {"handler": "h", "key": "b"}, {"handler": "h", "key": "b"}]}`)
	if r.status != 200 {
		t.Fatalf("batch: %d %s", r.status, r.body)
	}
	var batch struct {
		Jobs []struct {
			ID           int64           `json:"id"`
			Queue        string          `json:"queue"`
			Input        json.RawMessage `json:"input"`
			Deduplicated bool            `json:"deduplicated"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(r.body, &batch); err != nil || len(batch.Jobs) != 5 {
		t.Fatalf("batch answer %s", r.body)
	}
	j := batch.Jobs
	if string(j[0].Input) != "1" || !j[1].Deduplicated || j[1].ID != int64(first["id"].(float64)) ||
		j[2].Queue != "emails" || j[3].Deduplicated || !j[4].Deduplicated || j[4].ID != j[3].ID {
		t.Fatalf("batch answer not in request order or dedup wrong: %s", r.body)
	}
	if n := a.count("jobs"); n != 4 {
		t.Fatalf("%d jobs stored, want 4", n)
	}

	// Keyset pagination, newest first.
	var seen []float64
	cursor := ""
	for page := 0; page < 5; page++ {
		path := "/v1/jobs?limit=3"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		r = a.do("GET", path, "")
		p := r.json(t)
		for _, job := range p["jobs"].([]any) {
			seen = append(seen, job.(map[string]any)["id"].(float64))
		}
		if p["next_cursor"] == nil {
			break
		}
		cursor = p["next_cursor"].(string)
	}
	if len(seen) != 4 || seen[0] < seen[1] || seen[1] < seen[2] || seen[2] < seen[3] {
		t.Fatalf("pagination saw %v", seen)
	}
	r = a.do("GET", "/v1/jobs?queue=emails", "")
	if jobs := r.json(t)["jobs"].([]any); len(jobs) != 1 {
		t.Fatalf("queue filter: %s", r.body)
	}
	r = a.do("GET", fmt.Sprintf("/v1/jobs/%d", j[2].ID), "")
	d := r.json(t)
	if r.status != 200 || d["signals_total"] != float64(0) || d["children_total"] != float64(0) {
		t.Fatalf("get: %s", r.body)
	}
	if r = a.do("GET", "/v1/jobs/99999", ""); r.status != 404 {
		t.Fatalf("missing job: %d", r.status)
	}
	if r = a.do("GET", fmt.Sprintf("/v1/jobs/%d/steps", j[2].ID), ""); r.status != 200 || !bytes.Contains(r.body, []byte(`"steps":[]`)) {
		t.Fatalf("steps: %d %s", r.status, r.body)
	}
}

func TestHandlersAndQueues(t *testing.T) {
	t.Parallel()
	a := newAPI(t, httpapi.Config{})
	r := a.do("PUT", "/v1/handlers/mailer", `{"url": "https://hooks.example.com/mail", "timeout": "5s", "max_attempts": 3}`)
	h := r.json(t)
	if r.status != 200 || !strings.HasPrefix(h["secret"].(string), "whsec_") || h["timeout"] != "5s" || h["max_attempts"] != float64(3) {
		t.Fatalf("put handler: %s", r.body)
	}
	secret := h["secret"]
	r = a.do("PUT", "/v1/handlers/mailer", `{"url": "https://hooks.example.com/v2"}`)
	if h2 := r.json(t); h2["secret"] != secret || h2["url"] != "https://hooks.example.com/v2" || h2["timeout"] != "5s" {
		t.Fatalf("update kept neither secret nor settings: %s", r.body)
	}
	if r = a.do("GET", "/v1/handlers", ""); !bytes.Contains(r.body, []byte(`"name":"mailer"`)) {
		t.Fatalf("list: %s", r.body)
	}
	if r = a.do("DELETE", "/v1/handlers/mailer", ""); r.status != 204 {
		t.Fatalf("delete: %d", r.status)
	}
	if r = a.do("GET", "/v1/handlers/mailer", ""); r.status != 404 {
		t.Fatalf("after delete: %d", r.status)
	}

	a.registerHandler("h")
	a.do("POST", "/v1/jobs", `{"handler": "h", "queue": "bulk"}`)
	r = a.do("PUT", "/v1/queues/bulk", `{"paused": true, "max_in_flight": 7}`)
	q := r.json(t)
	if r.status != 200 || q["paused"] != true || q["max_in_flight"] != float64(7) || q["batch"] != float64(50) {
		t.Fatalf("pause: %s", r.body)
	}
	if counts := q["counts"].(map[string]any); counts["runnable"] != float64(1) {
		t.Fatalf("counts: %s", r.body)
	}
	r = a.do("PUT", "/v1/queues/bulk", `{"paused": false}`)
	if q = r.json(t); q["paused"] != false || q["max_in_flight"] != float64(7) {
		t.Fatalf("resume: %s", r.body)
	}
	if r = a.do("GET", "/v1/queues", ""); !bytes.Contains(r.body, []byte(`"name":"bulk"`)) {
		t.Fatalf("queues: %s", r.body)
	}
	if r = a.do("GET", "/v1/queues/nope", ""); r.status != 404 {
		t.Fatalf("missing queue: %d", r.status)
	}
}

func TestTokenGuardsV1Only(t *testing.T) {
	t.Parallel()
	a := newAPI(t, httpapi.Config{APIToken: "s3cret-token"})
	a.token = ""
	for _, path := range []string{"/v1/jobs", "/v1/handlers", "/v1/queues"} {
		if r := a.do("GET", path, ""); r.status != 401 || r.header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("%s without a token: %d", path, r.status)
		}
	}
	a.token = "wrong"
	if r := a.do("GET", "/v1/jobs", ""); r.status != 401 {
		t.Fatalf("wrong token: %d", r.status)
	}
	a.token = "s3cret-token"
	if r := a.do("GET", "/v1/jobs", ""); r.status != 200 {
		t.Fatalf("right token: %d", r.status)
	}
	a.token = ""
	for _, path := range []string{"/healthz", "/readyz", "/openapi.yaml"} {
		if r := a.do("GET", path, ""); r.status != 200 {
			t.Fatalf("%s: %d %s", path, r.status, r.body)
		}
	}
}

// PUT /v1/queues/{name} with Prefer: return=minimal stores the settings and answers 204
// without a body, and without the count of the queue's jobs (which reads the whole jobs
// table); without the preference, or with another one, it answers the queue.
func TestPutQueuePreferMinimal(t *testing.T) {
	t.Parallel()
	counter := &pg.StatementCounter{}
	a := newAPIWith(t, httpapi.Config{}, pg.Options{Counter: counter})
	put := func(prefer, body string) reply {
		h := http.Header{}
		if prefer != "" {
			h.Set("Prefer", prefer)
		}
		return a.doWith("PUT", "/v1/queues/q", body, h)
	}
	for _, prefer := range []string{"return=minimal", `respond-async, RETURN="minimal"; x=1`} {
		counter.Reset()
		r := put(prefer, `{"paused": true, "max_in_flight": 7}`)
		if r.status != http.StatusNoContent || len(r.body) != 0 || r.header.Get("Preference-Applied") != "return=minimal" {
			t.Fatalf("Prefer %q: %d %q, Preference-Applied %q", prefer, r.status, r.body, r.header.Get("Preference-Applied"))
		}
		if got := counter.Snapshot(); got["QueueCounts"] != 0 || got["QueueUpsert"] != 1 {
			t.Fatalf("Prefer %q ran %v, want one QueueUpsert and no count", prefer, got)
		}
		q, err := a.eng.GetQueue(context.Background(), "q")
		if err != nil || !q.Paused || q.MaxInFlight != 7 {
			t.Fatalf("Prefer %q stored %+v (%v)", prefer, q, err)
		}
	}
	for _, prefer := range []string{"", "return=representation", "respond-async"} {
		if r := put(prefer, `{"paused": false}`); r.status != http.StatusOK || r.json(t)["paused"] != false {
			t.Fatalf("Prefer %q: %d %s, want the queue", prefer, r.status, r.body)
		}
	}
	// A refused setting is refused the same way with the preference: nothing is stored.
	if r := put("return=minimal", `{"batch": 0}`); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("a bad setting with Prefer: %d %s", r.status, r.body)
	}
}
