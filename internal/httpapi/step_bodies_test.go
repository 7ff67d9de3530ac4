package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/gendurable/gendurable/internal/httpapi"
)

// The queue's step_bodies setting reads back, and the steps of a job answer each
// attempt's bodies: an outcome reported through the API keeps its posted body (without
// the token) as the response, as JSON, and no request; a done attempt under the default
// keeps none (bodies: null).
func TestStepBodiesOverTheAPI(t *testing.T) {
	t.Parallel()
	a := newAPI(t, httpapi.Config{})
	a.registerHandler("h")
	r := a.do("PUT", "/v1/queues/default", `{}`)
	if r.status != 200 || r.json(t)["step_bodies"] != "failures" {
		t.Fatalf("a new queue: %d %s", r.status, r.body)
	}
	run := func(answer string) []any {
		t.Helper()
		r := a.do("POST", "/v1/jobs", `{"handler": "h"}`)
		if r.status != 201 {
			t.Fatalf("insert: %d %s", r.status, r.body)
		}
		id := int64(r.json(t)["id"].(float64))
		steps, _, err := a.eng.Claim(context.Background(), "default", 1)
		if err != nil || len(steps) != 1 {
			t.Fatalf("claim: %d (%v)", len(steps), err)
		}
		r = a.do("POST", fmt.Sprintf("/v1/jobs/%d/outcome", id), fmt.Sprintf(`{"token": %q, %s}`, steps[0].LeaseToken, answer))
		if r.status != 200 {
			t.Fatalf("outcome: %d %s", r.status, r.body)
		}
		r = a.do("GET", fmt.Sprintf("/v1/jobs/%d/steps", id), "")
		if r.status != 200 {
			t.Fatalf("steps: %d %s", r.status, r.body)
		}
		list := r.json(t)["steps"].([]any)
		if len(list) != 1 {
			t.Fatalf("steps: %s", r.body)
		}
		return list
	}
	failed := run(`"fail": {"error": {"message": "card declined"}}`)[0].(map[string]any)
	bodies, ok := failed["bodies"].(map[string]any)
	if !ok || bodies["request"] != nil {
		t.Fatalf("a failed attempt's bodies: %v", failed["bodies"])
	}
	resp := bodies["response"].(map[string]any)
	want := `{"fail":{"error":{"message":"card declined"}}}`
	got, _ := json.Marshal(resp["body"])
	if resp["format"] != "json" || string(got) != want || resp["truncated"] != false || resp["size"] != float64(len(want)) {
		t.Fatalf("the response kept: %v (body %s)", resp, got)
	}
	done := run(`"done": {}`)[0].(map[string]any)
	if b, present := done["bodies"]; !present || b != nil {
		t.Fatalf("a done attempt's bodies: %v (present %v)", b, present)
	}
	if r = a.do("PUT", "/v1/queues/default", `{"step_bodies": "all"}`); r.status != 200 || r.json(t)["step_bodies"] != "all" {
		t.Fatalf("set all: %d %s", r.status, r.body)
	}
	if r = a.do("GET", "/v1/queues/default", ""); r.json(t)["step_bodies"] != "all" {
		t.Fatalf("get: %s", r.body)
	}
	if b := run(`"done": {"result": 1}`)[0].(map[string]any)["bodies"]; b == nil {
		t.Fatal("a done attempt kept nothing under all")
	}
}
