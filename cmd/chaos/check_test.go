package main

import "testing"

func TestCanonMatchesJSONBRendering(t *testing.T) {
	t.Parallel()
	// What the handler answers (Go's encoding) and what the service sends back (jsonb's
	// rendering: sorted keys, spaces) must compare equal; a changed value must not.
	handler := `{"phase":2,"sum":1250,"go":true,"sig":[2557,2562],"trail":["a","b"],"await_at":1796109713228}`
	jsonb := `{"go": true, "sig": [2557, 2562], "sum": 1250, "phase": 2, "trail": ["a", "b"], "await_at": 1796109713228}`
	if canon([]byte(handler)) != canon([]byte(jsonb)) {
		t.Fatalf("canon differs:\n%s\n%s", canon([]byte(handler)), canon([]byte(jsonb)))
	}
	if canon([]byte(`{"sum": 1251}`)) == canon([]byte(`{"sum": 1250}`)) {
		t.Fatal("canon hides a changed value")
	}
	if canon(nil) != "null" || canon([]byte("null")) != "null" {
		t.Fatal("absent and null state must both be null")
	}
}

func TestSummaryOK(t *testing.T) {
	t.Parallel()
	held := &invariant{Name: "a"}
	broken := &invariant{Name: "b", Violations: 1}
	if !(&summary{Invariants: []*invariant{held}}).ok() {
		t.Fatal("a run whose invariants all hold must pass")
	}
	if (&summary{Invariants: []*invariant{held, broken}}).ok() {
		t.Fatal("a run with a violation must fail")
	}
	// -sabotage: passes only when every sabotaged invariant reported violations.
	if !(&summary{Invariants: []*invariant{held, broken}, MustFail: []string{"b"}}).ok() {
		t.Fatal("sabotage caught: must pass")
	}
	if (&summary{Invariants: []*invariant{held, broken}, MustFail: []string{"a", "b"}}).ok() {
		t.Fatal("sabotage missed by a check: must fail")
	}
}
