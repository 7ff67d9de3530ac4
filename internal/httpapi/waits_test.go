package httpapi_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/httpapi"
	"github.com/gendurable/gendurable/internal/pg"
)

// GET /v1/jobs/{id}/waits: a job behind another of its concurrency key answers one slot
// wait from its insert until the holder's outcome (its attempt's finished_at); the holder and a job without a key
// answer none; an unknown job is a 404 and a bad id a 422, both problems.
func TestJobWaitsOverTheAPI(t *testing.T) {
	t.Parallel()
	a := newAPI(t, httpapi.Config{})
	a.registerHandler("h")
	insert := func(body string) int64 {
		r := a.do("POST", "/v1/jobs", body)
		if r.status != 201 {
			t.Fatalf("insert %s: %d %s", body, r.status, r.body)
		}
		return int64(r.json(t)["id"].(float64))
	}
	ctx := context.Background()
	holder := insert(`{"handler": "h", "concurrency_key": "k"}`)
	held, _, err := a.eng.Claim(ctx, "default", 10)
	if err != nil || len(held) != 1 || held[0].ID != holder {
		t.Fatalf("claimed %v (%v), want job %d alone", held, err, holder)
	}
	behind := insert(`{"handler": "h", "concurrency_key": "k"}`)
	plain := insert(`{"handler": "h"}`)
	waits := func(id int64) (kinds []string, starts, ends []time.Time) {
		t.Helper()
		r := a.do("GET", fmt.Sprintf("/v1/jobs/%d/waits", id), "")
		if r.status != 200 {
			t.Fatalf("waits of %d: %d %s", id, r.status, r.body)
		}
		body := r.json(t)
		if body["partial"] != false {
			t.Fatalf("waits of %d: partial in a queue of three jobs: %s", id, r.body)
		}
		for _, w := range body["waits"].([]any) {
			w := w.(map[string]any)
			s, _ := time.Parse(time.RFC3339Nano, w["start"].(string))
			e, _ := time.Parse(time.RFC3339Nano, w["end"].(string))
			kinds, starts, ends = append(kinds, w["kind"].(string)), append(starts, s), append(ends, e)
		}
		return kinds, starts, ends
	}
	// While the holder runs, the job behind it has waited for a slot since its insert.
	created := a.jobTime(behind, "created_at")
	if kinds, starts, _ := waits(behind); len(kinds) != 1 || kinds[0] != "slot" || !starts[0].Equal(created) {
		t.Fatalf("while %d holds the key, %d's waits are %v from %v; want one slot wait from its insert %s", holder, behind, kinds, starts, created)
	}
	if _, err := a.eng.ApplyOutcome(ctx, engine.StepOutcome{JobID: holder, Token: held[0].LeaseToken,
		Outcome: engine.Outcome{Kind: pg.KindDone, Label: "done"}}); err != nil {
		t.Fatal(err)
	}
	// The holder's attempt as the history keeps it: the wait ends at its outcome.
	r := a.do("GET", fmt.Sprintf("/v1/jobs/%d/steps", holder), "")
	attempts, _ := r.json(t)["steps"].([]any)
	if r.status != 200 || len(attempts) != 1 {
		t.Fatalf("steps of %d: %d %s", holder, r.status, r.body)
	}
	finished, err := time.Parse(time.RFC3339Nano, attempts[0].(map[string]any)["finished_at"].(string))
	if err != nil {
		t.Fatal(err)
	}
	kinds, _, ends := waits(behind)
	if len(kinds) != 1 || !ends[0].Equal(finished) {
		t.Fatalf("after %d finished at %s, %d's waits are %v ending %v; want the slot wait to end then", holder, finished, behind, kinds, ends)
	}
	for _, id := range []int64{holder, plain} {
		if kinds, _, _ := waits(id); len(kinds) != 0 {
			t.Errorf("job %d waited %v; it never waited for a slot", id, kinds)
		}
	}
	a.expectRefusals([]refusal{
		{"the waits of an unknown job", "GET", "/v1/jobs/999999999/waits", "", 404, ""},
		{"the waits of a bad id", "GET", "/v1/jobs/x/waits", "", 422, ""},
	})
}

// jobTime is a time field of GET /v1/jobs/{id}.
func (a *api) jobTime(id int64, field string) time.Time {
	a.t.Helper()
	r := a.do("GET", fmt.Sprintf("/v1/jobs/%d", id), "")
	if r.status != 200 {
		a.t.Fatalf("job %d: %d %s", id, r.status, r.body)
	}
	v, _ := r.json(a.t)[field].(string)
	at, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		a.t.Fatalf("job %d's %s is %q: %v", id, field, v, err)
	}
	return at
}
