package webhook

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// stepBodies are step requests of the service's shape and others: every member, signals
// and children, nulls, escapes, unknown and repeated keys, numbers out of range, broken JSON.
var stepBodies = []string{
	`{"job":{"id":123456,"queue":"drain1-1","handler":"bench","key":null,"step":0,"attempt":1,"max_attempts":5,"input":{"steps":1},"state":null,"created_at":"2026-12-02T01:06:08.123456Z"},"signals":[],"lease":{"token":"0b6f1f52-4a36-4b5e-9a39-3c2f3a1d2e4f","expires_at":"2026-12-02T01:06:38.123456Z"}}`,
	`{"job":{"id":7,"queue":"q","handler":"h","key":"order-1","step":3,"attempt":2,"max_attempts":9,"input":[1,"two",{"3":null}],"state":{"page":2},"created_at":"2026-12-02T01:06:08+02:00"},"signals":[{"id":1,"name":"approved","payload":{"by":"é"},"created_at":"2026-12-02T01:06:09.5Z"},{"id":2,"name":"x","payload":null,"created_at":"2026-12-02T01:06:10Z"}],"signals_more":4,"children":[{"id":8,"handler":"c","key":null,"status":"done","result":{"ok":true},"error":null},{"id":9,"handler":"c","key":"k","status":"failed","result":null,"error":"boom"}],"children_more":1,"lease":{"token":"t","expires_at":"2026-12-02T01:06:38Z"},"wake":"children"}`,
	` { "job" : { "id" : 1 , "queue" : "q" } , "signals" : [ ] , "lease" : { } } `,
	`{"job":{"id":1},"signals":null,"lease":{}}`,
	`{"job":null}`,
	`{"job":{"id":1.5}}`,
	`{"job":{"id":1e3}}`,
	`{"job":{"id":99999999999999999999}}`,
	`{"job":{"id":-0,"step":-3}}`,
	`{"job":{"id":"1"}}`,
	`{"job":{"queue":"a\"b","handler":"\u00e9"}}`,
	`{"job":{"queue":null,"key":"x"}}`,
	`{"job":{"created_at":null}}`,
	`{"job":{"created_at":"yesterday"}}`,
	`{"JOB":{"id":1}}`,
	`{"job":{"ID":1}}`,
	`{"job":{"id":1,"id":2}}`,
	`{"job":{"id":1},"job":{"queue":"q"}}`,
	`{"job":{"id":1,"extra":true}}`,
	`{"job":{"id":1,"extra":{"a":[1,{"b":"}"}]},"more":null},"pad":"xxxxxxxx","lease":{"token":"t","x":[]}}`,
	`{"Job":{"id":1}}`,
	`{"jób":{"id":1}}`,
	`{"job":{"Id":1}}`,
	`{"jo\u0062":{"id":1}}`,
	`{"wake":"signal","lease":{"token":"t"}}`,
	`{"signals":[{"id":1,"name":"n","payload":"\u0000","created_at":"2026-12-02T01:06:09Z"}]}`,
	"{\"job\":{\"queue\":\"\xff\"}}",
	`{"job":{"id":1}} {}`,
	`{"job":{"id":1}`,
	`[]`, `null`, `{}`, ``,
}

// decodeStep reads what json.Unmarshal reads, or declines.
func TestStepDecodeMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	accepted := 0
	for _, body := range stepBodies {
		if checkStepDecode(t, []byte(body)) {
			accepted++
		}
	}
	if accepted < 4 {
		t.Fatalf("the one pass read %d of the bodies, want at least the service's shapes", accepted)
	}
	if !checkStepDecode(t, []byte(stepBodies[0])) || !checkStepDecode(t, []byte(stepBodies[1])) {
		t.Fatal("the one pass declined a body of the service's shape")
	}
	// A member the service may add later (and the bench's River peer's padding) is skipped.
	padded := strings.TrimSuffix(stepBodies[0], "}") + `,"pad":"` + strings.Repeat("x", 40) + `","future":{"a":[1]}}`
	if !checkStepDecode(t, []byte(padded)) {
		t.Fatal("the one pass declined a body with a member it does not know")
	}
}

func FuzzStepDecode(f *testing.F) {
	for _, b := range stepBodies {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkStepDecode(t, body) })
}

// checkStepDecode fails t when decodeStep accepts body and reads anything but what
// json.Unmarshal reads; it reports whether decodeStep accepted it.
func checkStepDecode(t *testing.T, body []byte) bool {
	t.Helper()
	got, isStep, ok := decodeStep(body)
	if !ok {
		return false
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(body, &members); err != nil {
		t.Fatalf("the one pass read %q, not an object", body)
	}
	if has := members["job"] != nil && members["lease"] != nil; isStep != has {
		t.Fatalf("the one pass says %q has job and lease: %v, want %v", body, isStep, has)
	}
	var want StepRequest
	if err := json.Unmarshal(body, &want); err != nil {
		t.Fatalf("the one pass read %q, encoding/json refuses it: %v", body, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\none pass      %+v\nencoding/json %+v", body, got, want)
	}
	if strings.TrimSpace(string(body)) == "" {
		t.Fatal("read an empty body")
	}
	return true
}
