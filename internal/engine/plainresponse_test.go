package engine

import (
	"reflect"
	"testing"
)

// answerBodies are step answers of every shape: the plain ones the one pass reads and
// others, left to encoding/json.
var answerBodies = []string{
	`{"done":{}}`,
	`{"done": {"result": {"sent": true, "n": [1, 2.5e3, "x"]}}}`,
	` { "done" : { "result" : "text \u00e9 \" \\" } } `,
	`{"done": {"result": 12}}`,
	`{"done": {"result": [1, {"a": "}"}]}}`,
	`{"done": {"result": true}}`,
	`{"next": {}}`,
	`{"next": {"state": {"page": 2}}}`,
	"{\"next\":\n{\"state\":[]}\n}\n",
	`{"done": {"result": null}}`,
	`{"done": null}`,
	`{"next": {"state": {}, "delay": "1s"}}`,
	`{"next": {"delay": "1s"}}`,
	`{"done": {}, "next": {}}`,
	`{"done": {"result": 1, "result": 2}}`,
	`{"Done": {}}`,
	`{"done": {"Result": 1}}`,
	`{"done": {"extra": 1}}`,
	`{"d\u006fne": {}}`,
	`{"done": {}} {"done": {}}`,
	`{"done": {}}]`,
	`{"done": []}`,
	`{"done": {"result": 1}`,
	`{"retry": {"delay": "2s"}}`,
	`{"fail": {"error": "no"}}`,
	`{"await": {"signals": ["go"]}}`,
	`[]`,
	``,
	`{"done": {"result": "\ud800"}}`,
	"{\"done\": {\"result\": \"\xff\"}}",
}

// The one pass reads a plain answer as encoding/json does; every other answer it leaves
// to encoding/json; and DecodeResponse gives the same outcome, or an error, either way.
func TestPlainResponseDecodesAsEncodingJSON(t *testing.T) {
	for i, body := range answerBodies {
		plain := assertPlainResponse(t, []byte(body))
		if i < 9 && !plain {
			t.Errorf("answer %d is plain, and the one pass left it to encoding/json: %s", i, body)
		}
	}
}

// assertPlainResponse checks body both ways and says whether the one pass read it.
func assertPlainResponse(t *testing.T, body []byte) bool {
	t.Helper()
	r, ok := decodePlainResponse(body)
	if !ok {
		return false
	}
	want, err := decodeResponseJSON(body)
	if err != nil {
		t.Fatalf("%q: the one pass read it, encoding/json refuses it: %v", body, err)
	}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("%q: the one pass read %+v, encoding/json %+v", body, r, want)
	}
	got, gotErr := FromResponse(r)
	exp, expErr := FromResponse(want)
	if (gotErr == nil) != (expErr == nil) || !reflect.DeepEqual(got, exp) {
		t.Fatalf("%q: outcomes differ: %+v %v against %+v %v", body, got, gotErr, exp, expErr)
	}
	return true
}

func FuzzPlainResponseDecodesAsEncodingJSON(f *testing.F) {
	for _, body := range answerBodies {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { assertPlainResponse(t, body) })
}
