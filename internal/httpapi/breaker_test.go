package httpapi_test

import (
	"context"
	"testing"

	"github.com/gendurable/gendurable/internal/httpapi"
	"github.com/gendurable/gendurable/internal/pg"
)

// problemFields lists the fields a problem document names.
func problemFields(t *testing.T, r reply) []string {
	t.Helper()
	var out []string
	errs, _ := r.json(t)["errors"].([]any)
	for _, e := range errs {
		out = append(out, e.(map[string]any)["field"].(string))
	}
	return out
}

// The handler's breaker: defaults for a handler registered without one (the PUT stays
// backward compatible), settings taken and kept, the state shown as it changes, bad
// settings refused naming the field without writing, and resume.
func TestHandlerBreakerSettingsStateAndResume(t *testing.T) {
	t.Parallel()
	a := newAPI(t, httpapi.Config{})
	a.registerHandler("h")
	b := a.do("GET", "/v1/handlers/h", "").json(t)["breaker"].(map[string]any)
	want := map[string]any{"threshold": float64(10), "probe_interval": "5s", "probe_interval_max": "5m0s",
		"pause_after": "1h0m0s", "state": "closed", "consecutive_failures": float64(0), "opened_at": nil,
		"next_probe_at": nil, "opens": float64(0), "paused": false, "paused_at": nil, "paused_reason": nil}
	for k, v := range want {
		if b[k] != v {
			t.Errorf("default breaker %s = %v, want %v", k, b[k], v)
		}
	}

	r := a.do("PUT", "/v1/handlers/h", `{"url": "http://93.184.215.14/steps",
		"breaker": {"threshold": 2, "probe_interval": "250ms", "probe_interval_max": "10s", "pause_after": "0s"}}`)
	if r.status != 200 {
		t.Fatalf("PUT with a breaker: %d %s", r.status, r.body)
	}
	// A later PUT without the breaker keeps its settings.
	if r = a.do("PUT", "/v1/handlers/h", `{"url": "http://93.184.215.14/v2"}`); r.status != 200 {
		t.Fatalf("PUT without a breaker: %d %s", r.status, r.body)
	}
	b = r.json(t)["breaker"].(map[string]any)
	if b["threshold"] != float64(2) || b["probe_interval"] != "250ms" || b["probe_interval_max"] != "10s" || b["pause_after"] != "0s" {
		t.Fatalf("breaker settings after a PUT without them: %v", b)
	}

	for _, c := range []struct{ body, field string }{
		{`{"url": "http://93.184.215.14/", "breaker": {"threshold": -1}}`, "breaker/threshold"},
		{`{"url": "http://93.184.215.14/", "breaker": {"probe_interval": "0s"}}`, "breaker/probe_interval"},
		{`{"url": "http://93.184.215.14/", "breaker": {"probe_interval_max": "48h"}}`, "breaker/probe_interval_max"},
		{`{"url": "http://93.184.215.14/", "breaker": {"pause_after": "soon"}}`, "breaker/pause_after"},
		{`{"url": "http://93.184.215.14/", "breaker": {"treshold": 3}}`, "breaker/treshold"},
	} {
		r := a.do("PUT", "/v1/handlers/h", c.body)
		if r.status != 422 || r.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %s", c.body, r.status, r.body)
			continue
		}
		if fields := problemFields(t, r); len(fields) == 0 || fields[0] != c.field {
			t.Errorf("%s: the problem names %v, want %s", c.body, fields, c.field)
		}
	}
	if r := a.do("GET", "/v1/handlers/h", ""); r.json(t)["url"] != "http://93.184.215.14/v2" ||
		r.json(t)["breaker"].(map[string]any)["threshold"] != float64(2) {
		t.Fatalf("a refused PUT wrote: %s", r.body)
	}

	// Open it (two failures reach the threshold) and pause it, then resume.
	ctx := context.Background()
	if _, err := a.db.HandlerBreakerRecord(ctx, []pg.BreakerTally{{Handler: "h", Failures: 2}}, nil); err != nil {
		t.Fatal(err)
	}
	b = a.do("GET", "/v1/handlers", "").json(t)["handlers"].([]any)[0].(map[string]any)["breaker"].(map[string]any)
	if b["state"] != "open" || b["consecutive_failures"] != float64(2) || b["opened_at"] == nil || b["next_probe_at"] == nil || b["opens"] != float64(1) {
		t.Fatalf("open breaker in the list: %v", b)
	}
	if _, err := a.db.Exec(ctx, `UPDATE handlers SET paused_at = now(), paused_reason = 'test' WHERE name = 'h'`); err != nil {
		t.Fatal(err)
	}
	if b = a.do("GET", "/v1/handlers/h", "").json(t)["breaker"].(map[string]any); b["paused"] != true || b["paused_reason"] != "test" {
		t.Fatalf("paused breaker: %v", b)
	}
	r = a.do("POST", "/v1/handlers/h/resume", "")
	if r.status != 200 {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	if b = r.json(t)["breaker"].(map[string]any); b["state"] != "closed" || b["paused"] != false || b["consecutive_failures"] != float64(0) {
		t.Fatalf("resumed breaker: %v", b)
	}
	if r = a.do("POST", "/v1/handlers/nobody/resume", ""); r.status != 404 {
		t.Fatalf("resume of an unknown handler: %d %s", r.status, r.body)
	}
}
