package webhook_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/webhook"
)

// FuzzDecodeResponse feeds arbitrary bodies to the parser of a handler's answer (what
// the dispatcher reads from a 200 and the API from an asynchronous outcome). It must
// never panic, and whatever it accepts must be one well-formed outcome: one kind, no
// negative delay or timeout, JSON payloads that are valid, children that passed the
// insert validation, and an answer that survives a round trip through the SDK's types.
// Seeds: testdata/fuzz/FuzzDecodeResponse and the answers below.
func FuzzDecodeResponse(f *testing.F) {
	for _, seed := range []string{
		`{"next": {"state": {"n": 1}, "delay": "30s"}}`,
		`{"await": {"signals": ["approved"], "timeout": "24h", "state": {}}}`,
		`{"await": {}}`,
		`{"spawn": {"children": [{"handler": "email", "input": {"to": "a"}, "key": "k", "delay": "1s"}], "state": [1]}}`,
		`{"done": {"result": {"ok": true}}}`,
		`{"fail": {"error": "boom"}}`,
		`{"retry": {"error": {"code": 7}, "delay": "10s"}}`,
		`{"next": {}, "done": {}}`,
		`{"next": {"delay": "-1s"}}`,
		`{"next": {"delay": "9999999999h"}}`,
		`{"retry": {"delay": 5}}`,
		`{"done": {"result": null}} {}`,
		`{"nxt": {}}`,
		`{"spawn": {"children": [{"handler": "bad name"}]}}`,
		`{"spawn": {"children": [{"handler": "h", "priority": 99}]}}`,
		`[]`, `null`, ``, `{`,
	} {
		f.Add([]byte(seed))
	}
	kinds := map[string]bool{pg.KindNext: true, pg.KindAwait: true, pg.KindSpawn: true, pg.KindDone: true,
		pg.KindFail: true, pg.KindRetry: true}
	f.Fuzz(func(t *testing.T, body []byte) {
		o, err := engine.DecodeResponse(body)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error without a message")
			}
			return
		}
		if !kinds[o.Kind] || o.Label == "" {
			t.Fatalf("accepted %q as kind %q, label %q", body, o.Kind, o.Label)
		}
		if o.Delay != nil && *o.Delay < 0 || o.Timeout != nil && *o.Timeout < 0 {
			t.Fatalf("accepted a negative duration from %q: %+v", body, o)
		}
		for name, doc := range map[string]json.RawMessage{"state": o.State, "result": o.Result, "error": o.Error} {
			if doc != nil && !json.Valid(doc) {
				t.Fatalf("accepted invalid JSON as %s from %q", name, body)
			}
		}
		if (o.Kind == pg.KindFail || o.Kind == pg.KindRetry) && o.Error == nil {
			t.Fatalf("a %s without an error from %q", o.Kind, body)
		}
		for i, c := range o.Children {
			if !engine.ValidName(c.Handler) || c.Priority != nil && (*c.Priority < 0 || *c.Priority > 9) {
				t.Fatalf("child %d of %q passed validation: %+v", i, body, c)
			}
		}
		// The SDK's types write what the parser reads: the same answer decodes alike.
		var r webhook.Response
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatalf("the parser accepted %q but the SDK's types refuse it: %v", body, err)
		}
		again, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("re-encoding %q: %v", body, err)
		}
		o2, err := engine.DecodeResponse(again)
		if err != nil {
			t.Fatalf("%q decoded, its re-encoding %s did not: %v", body, again, err)
		}
		if o2.Kind != o.Kind || len(o2.Children) != len(o.Children) || !sameDuration(o.Delay, o2.Delay) ||
			!sameDuration(o.Timeout, o2.Timeout) || !sameJSON(o.State, o2.State) || !sameJSON(o.Result, o2.Result) {
			t.Fatalf("round trip changed the answer: %q -> %s", body, again)
		}
	})
}

func sameDuration[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

// sameJSON compares two documents as values: encoding/json escapes <, > and & on the way
// out ("&" becomes "\u0026"), which changes the bytes and not the value.
func sameJSON(a, b json.RawMessage) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var x, y any
	dx, dy := json.NewDecoder(bytes.NewReader(a)), json.NewDecoder(bytes.NewReader(b))
	dx.UseNumber()
	dy.UseNumber()
	return dx.Decode(&x) == nil && dy.Decode(&y) == nil && reflect.DeepEqual(x, y)
}
