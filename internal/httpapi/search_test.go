package httpapi_test

import (
	"context"
	"encoding/json"
	"net/url"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/httpapi"
	"github.com/gendurable/gendurable/internal/pg"
)

// GET /v1/jobs searches by payload within a time window: input_contains and
// result_contains keep the jobs whose input or result contains the JSON given, only
// created within the window; a search without a window, a window over 7 days, JSON that
// does not parse and an inverted window are refused, naming the parameter.
func TestSearchJobsByPayload(t *testing.T) {
	t.Parallel()
	a := newAPI(t, httpapi.Config{})
	a.registerHandler("h")
	for _, in := range []string{`{"customer": "c-1", "n": 1}`, `{"customer": "c-2", "n": 2}`, `{"customer": "c-1", "n": 3, "vip": true}`} {
		if r := a.do("POST", "/v1/jobs", `{"handler": "h", "input": `+in+`}`); r.status != 201 {
			t.Fatalf("insert: %d %s", r.status, r.body)
		}
	}
	// An old job of c-1, outside the window.
	if _, err := a.db.Exec(context.Background(), `UPDATE jobs SET created_at = now() - interval '2 days' WHERE input->>'n' = '1'`); err != nil {
		t.Fatal(err)
	}
	// One finished with a result.
	ctx := context.Background()
	steps, _, err := a.eng.Claim(ctx, "default", 1)
	if err != nil || len(steps) != 1 {
		t.Fatalf("claim: %v", err)
	}
	if _, err := a.eng.ApplyOutcome(ctx, engine.StepOutcome{JobID: steps[0].ID, Token: steps[0].LeaseToken,
		Outcome: engine.Outcome{Kind: pg.KindDone, Label: "done", Result: json.RawMessage(`{"invoice": "inv-9", "total": 12}`)}}); err != nil {
		t.Fatal(err)
	}
	since := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	list := func(q url.Values) ([]map[string]any, reply) {
		t.Helper()
		r := a.do("GET", "/v1/jobs?"+q.Encode(), "")
		var page struct{ Jobs []map[string]any }
		_ = json.Unmarshal(r.body, &page)
		return page.Jobs, r
	}
	jobs, r := list(url.Values{"input_contains": {`{"customer": "c-1"}`}, "created_after": {since}})
	if r.status != 200 || len(jobs) != 1 || jobs[0]["input"].(map[string]any)["n"] != float64(3) {
		t.Fatalf("c-1 in the last hour: %d %s", r.status, r.body)
	}
	jobs, _ = list(url.Values{"input_contains": {`{"customer": "c-1"}`}, "created_after": {time.Now().Add(-72 * time.Hour).UTC().Format(time.RFC3339)}})
	if len(jobs) != 2 {
		t.Fatalf("c-1 in three days: %d jobs, want 2", len(jobs))
	}
	jobs, _ = list(url.Values{"result_contains": {`{"invoice": "inv-9"}`}, "created_after": {time.Now().Add(-72 * time.Hour).UTC().Format(time.RFC3339)}})
	if len(jobs) != 1 || jobs[0]["id"] != float64(steps[0].ID) {
		t.Fatalf("the result search found %v", jobs)
	}
	jobs, _ = list(url.Values{"input_contains": {`{"customer": "c-1"}`}, "created_after": {since},
		"created_before": {time.Now().Add(-30 * time.Minute).UTC().Format(time.RFC3339)}})
	if len(jobs) != 0 {
		t.Fatalf("a window before every job found %d", len(jobs))
	}
	for _, c := range []struct {
		name  string
		q     url.Values
		field string
	}{
		{"no window", url.Values{"input_contains": {`{"customer": "c-1"}`}}, "query/created_after"},
		{"eight days", url.Values{"input_contains": {`{"a": 1}`}, "created_after": {time.Now().Add(-192 * time.Hour).UTC().Format(time.RFC3339)}}, "query/created_after"},
		{"not JSON", url.Values{"input_contains": {`{customer: c-1}`}, "created_after": {since}}, "query/input_contains"},
		{"inverted", url.Values{"created_after": {since}, "created_before": {time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC3339)}}, "query/created_before"},
		{"not a time", url.Values{"created_after": {"yesterday"}}, "query/created_after"},
	} {
		_, r := list(c.q)
		if r.status != 422 || r.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %s", c.name, r.status, r.body)
			continue
		}
		found := false
		errs, _ := r.json(t)["errors"].([]any)
		for _, e := range errs {
			found = found || e.(map[string]any)["field"] == c.field
		}
		if !found {
			t.Errorf("%s: the problem does not name %s: %s", c.name, c.field, r.body)
		}
	}
}
