package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/httpapi"
	"github.com/gendurable/gendurable/internal/pg"
)

// snapshot is what a refused request must leave as it was: every job's status, step and
// update time, and the history's size.
func (a *api) snapshot() string {
	a.t.Helper()
	// Two statements: Citus cannot push a subquery in the target list down to the shards.
	jobs, err := a.db.QueryStrings(context.Background(),
		`SELECT coalesce(string_agg(id || ':' || status || ':' || step || ':' || updated_at, ',' ORDER BY id), '') FROM jobs`)
	if err != nil {
		a.t.Fatal(err)
	}
	steps, err := a.db.QueryStrings(context.Background(), `SELECT count(*) FROM steps`)
	if err != nil {
		a.t.Fatal(err)
	}
	return jobs[0][0] + "/" + steps[0][0]
}

// finish runs the one runnable step of "default" to the outcome o.
func (a *api) finish(o engine.Outcome) {
	a.t.Helper()
	ctx := context.Background()
	steps, _, err := a.eng.Claim(ctx, "default", 1)
	if err != nil || len(steps) != 1 {
		a.t.Fatalf("claimed %d (%v)", len(steps), err)
	}
	if _, err := a.eng.ApplyOutcome(ctx, engine.StepOutcome{JobID: steps[0].ID, Token: steps[0].LeaseToken, Outcome: o}); err != nil {
		a.t.Fatal(err)
	}
}

// POST /v1/jobs/{id}/replay and /rerun: bad input, a live job and a missing one answer a
// problem (naming the field for a 422) and write nothing; a finished job is replayed in
// place (200, runnable at the step asked) and rerun as a new linked job (201).
func TestReplayAndRerunOverTheAPI(t *testing.T) {
	t.Parallel()
	a := newAPI(t, httpapi.Config{})
	a.registerHandler("h")
	r := a.do("POST", "/v1/jobs", `{"handler": "h", "input": {"n": 1}, "key": "k-1"}`)
	if r.status != 201 {
		t.Fatalf("insert: %d %s", r.status, r.body)
	}
	id := int64(r.json(t)["id"].(float64))
	replay, rerun := fmt.Sprintf("/v1/jobs/%d/replay", id), fmt.Sprintf("/v1/jobs/%d/rerun", id)

	refused := func(when string, cases []struct {
		name, path, body string
		status           int
		field            string
	}) {
		t.Helper()
		before := a.snapshot()
		for _, c := range cases {
			r := a.do("POST", c.path, c.body)
			if r.status != c.status {
				t.Errorf("%s, %s: status %d, want %d: %s", when, c.name, r.status, c.status, r.body)
				continue
			}
			if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("%s, %s: content type %q", when, c.name, ct)
			}
			p := r.json(t)
			if p["type"] == nil || p["title"] == nil || p["status"] != float64(c.status) {
				t.Errorf("%s, %s: not a problem document: %s", when, c.name, r.body)
			}
			if c.field != "" {
				found := false
				errs, _ := p["errors"].([]any)
				for _, e := range errs {
					found = found || e.(map[string]any)["field"] == c.field
				}
				if !found {
					t.Errorf("%s, %s: the problem does not name %q: %s", when, c.name, c.field, r.body)
				}
			}
		}
		if after := a.snapshot(); after != before {
			t.Fatalf("%s: refused requests wrote: %s → %s", when, before, after)
		}
	}
	type c = struct {
		name, path, body string
		status           int
		field            string
	}
	refused("live", []c{
		{"malformed JSON", replay, `{"from_step": `, 400, ""},
		{"no from_step", replay, `{}`, 422, "from_step"},
		{"from_step negative", replay, `{"from_step": -1}`, 422, "from_step"},
		{"from_step not an integer", replay, `{"from_step": "one"}`, 422, "from_step"},
		{"unknown field", replay, `{"from_step": 0, "stat": {}}`, 422, "stat"},
		{"rerun unknown field", rerun, `{"inptu": {}}`, 422, "inptu"},
		{"a live job", replay, `{"from_step": 0}`, 409, ""},
		{"a live job's rerun", rerun, `{}`, 409, ""},
		{"a missing job", "/v1/jobs/999999999/replay", `{"from_step": 0}`, 404, ""},
		{"a missing job's rerun", "/v1/jobs/999999999/rerun", `{}`, 404, ""},
	})

	a.finish(engine.Outcome{Kind: pg.KindNext, Label: "next", State: json.RawMessage(`{"s": 1}`)})
	a.finish(engine.Outcome{Kind: pg.KindNext, Label: "next", State: json.RawMessage(`{"s": 2}`)})
	a.finish(engine.Outcome{Kind: pg.KindFail, Label: "fail", Error: json.RawMessage(`{"message": "no"}`)})
	refused("failed", []c{
		{"from_step past the end", replay, `{"from_step": 3}`, 422, "from_step"},
		{"a state the history did not keep", replay, `{"from_step": 1}`, 422, "state"},
	})

	r = a.do("POST", replay, `{"from_step": 1, "state": {"s": 10}}`)
	if r.status != 200 {
		t.Fatalf("replay: %d %s", r.status, r.body)
	}
	if j := r.json(t); j["status"] != "runnable" || j["step"] != float64(1) || j["error"] != nil {
		t.Fatalf("the replayed job: %s", r.body)
	}
	ctx := context.Background()
	steps, _, err := a.eng.Claim(ctx, "default", 1)
	if err != nil || len(steps) != 1 || string(steps[0].State) != `{"s": 10}` {
		t.Fatalf("the replayed step: %+v (%v)", steps, err)
	}
	if _, err := a.eng.ApplyOutcome(ctx, engine.StepOutcome{JobID: id, Token: steps[0].LeaseToken,
		Outcome: engine.Outcome{Kind: pg.KindDone, Label: "done"}}); err != nil {
		t.Fatal(err)
	}
	r = a.do("POST", rerun, `{"input": {"n": 2}}`)
	if r.status != 201 {
		t.Fatalf("rerun: %d %s", r.status, r.body)
	}
	if j := r.json(t); j["rerun_of"] != float64(id) || j["id"] == float64(id) || j["key"] != "k-1" || j["status"] != "runnable" {
		t.Fatalf("the rerun: %s", r.body)
	}
	// The rerun holds the key: the old job's replay is a conflict, nothing written.
	refused("key held by the rerun", []c{
		{"replay", replay, `{"from_step": 0}`, 409, ""},
		{"rerun", rerun, `{}`, 409, ""},
	})
}
