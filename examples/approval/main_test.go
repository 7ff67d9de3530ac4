package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/gendurable/gendurable/webhook"
)

// A decision sent while the job still waited for its notify child arrives with the step
// the children's end wakes; that step consumes it, so the handler must decide there and
// not await a signal that already came (the README quickstart once hung on this race).
func TestADecisionThatArrivedWithTheChildrenIsTaken(t *testing.T) {
	req := &webhook.StepRequest{Wake: "children"}
	req.Job.Step = 1
	req.Job.Input = json.RawMessage(`{"amount": 120, "approver": "grace@example.com"}`)
	req.Children = []webhook.Child{{Status: "done"}}
	req.Signals = []webhook.Signal{{Name: "approved", Payload: json.RawMessage(`{"by":"grace"}`)}}
	got := expenseStep(context.Background(), req)
	if got.Done == nil || !json.Valid(got.Done.Result) {
		t.Fatalf("the step answered %+v, want done with the decision", got)
	}
	var result struct{ Decision string }
	_ = json.Unmarshal(got.Done.Result, &result)
	if result.Decision != "approved" {
		t.Fatalf("decision %q, want approved", result.Decision)
	}
	// Without a decision in hand, the children's step awaits one.
	req.Signals = nil
	if got := expenseStep(context.Background(), req); got.Await == nil {
		t.Fatalf("with no signal the step answered %+v, want await", got)
	}
}
