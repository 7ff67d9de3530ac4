package httpapi_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gendurable/gendurable/internal/httpapi"
)

// Schedules over the API: PUT, GET, list, DELETE, and 422s that name the field and
// write nothing.
func TestSchedulesAPI(t *testing.T) {
	t.Parallel()
	a := newAPI(t, httpapi.Config{})
	a.registerHandler("report")
	for _, c := range []struct{ body, field string }{
		{`{"cron": "*/5 * * *", "handler": "report"}`, "cron"},
		{`{"cron": "*/5 * * * *", "timezone": "Europe/Nowhere", "handler": "report"}`, "timezone"},
		{`{"cron": "*/5 * * * *", "handler": "unknown"}`, "handler"},
		{`{"cron": "*/5 * * * *", "handler": "report", "overlap": "never"}`, "overlap"},
	} {
		r := a.do("PUT", "/v1/schedules/nightly", c.body)
		if r.status != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), `"field":"`+c.field) {
			t.Errorf("%s: %d %s, want 422 naming %s", c.body, r.status, r.body, c.field)
		}
	}
	if n := a.count("schedules"); n != 0 {
		t.Fatalf("%d schedules written by refused requests", n)
	}
	r := a.do("PUT", "/v1/schedules/nightly", `{"cron": "0 30 2 * * *", "timezone": "Europe/Paris", "handler": "report",
		"input": {"kind": "daily"}, "overlap": "skip"}`)
	if r.status != 200 {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	got := r.json(t)
	if got["timezone"] != "Europe/Paris" || got["overlap"] != "skip" || got["queue"] != "default" || got["next_run_at"] == nil ||
		got["last_job_id"] != nil {
		t.Fatalf("put answered %v", got)
	}
	if r := a.do("PUT", "/v1/schedules/every", `{"cron": "@every 30s", "handler": "report"}`); r.status != 200 {
		t.Fatalf("put @every: %d %s", r.status, r.body)
	}
	if r := a.do("GET", "/v1/schedules/nightly", ""); r.status != 200 || r.json(t)["cron"] != "0 30 2 * * *" {
		t.Fatalf("get: %d %s", r.status, r.body)
	}
	if r := a.do("GET", "/v1/schedules", ""); r.status != 200 || strings.Count(string(r.body), `"name"`) != 2 {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	if r := a.do("DELETE", "/v1/schedules/nightly", ""); r.status != 204 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if r := a.do("GET", "/v1/schedules/nightly", ""); r.status != 404 {
		t.Fatalf("get after delete: %d %s", r.status, r.body)
	}
}

// The Idempotency-Key header answers the job it made (200, deduplicated), also after
// the job finished; the batch takes idempotency_key per item.
func TestIdempotencyKeyHeader(t *testing.T) {
	t.Parallel()
	a := newAPI(t, httpapi.Config{})
	a.registerHandler("h")
	post := func(key string) reply {
		t.Helper()
		req, _ := http.NewRequest("POST", a.url+"/v1/jobs", strings.NewReader(`{"handler": "h"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = io.Copy(&b, resp.Body)
		return reply{status: resp.StatusCode, body: []byte(b.String())}
	}
	first := post("pay-1")
	if first.status != 201 {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	id := first.json(t)["id"]
	if _, err := a.db.Exec(t.Context(), "UPDATE jobs SET status = 'done', finished_at = now()"); err != nil {
		t.Fatal(err)
	}
	again := post("pay-1")
	if got := again.json(t); again.status != 200 || got["id"] != id || got["deduplicated"] != true || got["status"] != "done" {
		t.Fatalf("repeat after finish: %d %s", again.status, again.body)
	}
	r := a.do("POST", "/v1/jobs/batch", `{"jobs": [{"handler": "h", "idempotency_key": "pay-1"}, {"handler": "h", "idempotency_key": "pay-2"}]}`)
	if r.status != 200 || !strings.Contains(string(r.body), `"deduplicated":true`) || !strings.Contains(string(r.body), `"deduplicated":false`) {
		t.Fatalf("batch: %d %s", r.status, r.body)
	}
	if n := a.count("jobs"); n != 2 {
		t.Fatalf("%d jobs, want 2", n)
	}
}
