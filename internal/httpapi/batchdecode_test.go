package httpapi

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// batchBodies are batch bodies of every shape: the schema's (which the one pass reads)
// and others, which encoding/json decodes.
var batchBodies = []string{
	`{"jobs": [{"handler": "h", "queue": "bulk", "input": {"n": 0, "user": "u0"}}, {"handler": "h", "queue": "bulk", "input": {"n": 1}}]}`,
	`{"jobs":[{"handler":"h"}]}`,
	` { "jobs" : [ { "handler" : "h" , "input" : [1, "x", {"a": null}] } , {"handler": "g", "queue": "q2", "input": 5} ] } `,
	`{"jobs": [{"handler": "h", "queue": "q", "input": "text", "key": "k1", "concurrency_key": "c", "idempotency_key": "i",
	  "fairness_key": "tenant-1", "delay": "1m30s", "priority": 0, "max_attempts": 7, "run_at": "2026-12-01T10:00:00.5+01:00",
	  "rate_limit": {"name": "r", "key": "k", "weight": 2}, "debounce": {"key": "d", "period": "1s", "max_wait": "5s"}},
	  {"handler": "h", "rate_limits": [{"name": "a"}, {"name": "b", "weight": 3}], "priority": -1, "max_attempts": 12345}]}`,
	`{"jobs": []}`,
	`{"jobs": [{}]}`,
	`{"jobs": [{"handler": "h\u00e9", "key": "a\"b", "queue": "caf\u00e9"}]}`,
	`{"jobs": [{"handler": "é", "key": "日本", "input": "\ud83d\ude00"}]}`,
	`{"jobs": [{"handler": "h", "key": null, "input": null, "priority": null, "queue": null}]}`,
	`{"jobs": [{"Handler": "h", "QUEUE": "q"}]}`,
	`{"jobs": [{"handler": "h", "priority": 1.0}]}`,
	`{"jobs": [{"handler": "h", "priority": 1e2}]}`,
	`{"jobs": [{"handler": "h", "priority": 99999999999999999999}]}`,
	`{"jobs": [{"handler": "h", "key": "a", "key": "b", "input": 1, "input": 2}]}`,
	`{"jobs": [{"handler": "h", "rate_limit": {"name": "a"}, "rate_limit": {"weight": 4}}]}`,
	`{"jobs": [{"handler": "h"}], "jobs": [{"handler": "g"}]}`,
	`{"jobs": [{"handler": "h", "extra": 1}]}`,
	`{"jobs": [{"handler": "h"}], "other": true}`,
	`{"jobs": [{"handler": 5}]}`,
	`{"jobs": [{"handler": "h", "run_at": "yesterday"}]}`,
	`{"jobs": [{"handler": "h", "priority": "1"}]}`,
	`{"jobs": {"handler": "h"}}`,
	`{"jobs": null}`,
	`[]`,
	`{"jobs": [["h"]]}`,
	`{"jobs": [{"handler": "h", "debounce": {"key": "d", "period": 1}}]}`,
	`{"jobs": [{"handler": "h", "input": {"deep": [[[{"x": "]}\"["}]]]}}]}`,
	"{\"jobs\": [{\"handler\": \"h\xff\"}]}",
}

// The one pass decodes a batch as encoding/json decodes the generated struct: the same
// jobs, or the same error, for every body; and it is the one pass (not encoding/json)
// that reads the bodies of the schema's shape, every member of JobInsert included.
func TestBatchDecodeMatchesEncodingJSON(t *testing.T) {
	for i, body := range batchBodies {
		assertBatchDecode(t, []byte(body))
		if i < 4 {
			if _, ok := decodeJobBatch([]byte(body)); !ok {
				t.Errorf("body %d is the schema's shape, and the one pass left it to encoding/json: %s", i, body)
			}
		}
	}
	// Every member of JobInsert is one the pass reads.
	jobType := reflect.TypeOf(JobInsert{})
	for i := range jobType.NumField() {
		name, _, _ := strings.Cut(jobType.Field(i).Tag.Get("json"), ",")
		if !strings.Contains(batchBodies[3], `"`+name+`"`) {
			t.Errorf("JobInsert has member %q, which the test's full body lacks: add it (and to decodeJobBatch)", name)
		}
	}
}

func assertBatchDecode(t *testing.T, body []byte) {
	t.Helper()
	type plain JobBatch
	var got JobBatch
	var want plain
	gotErr, wantErr := json.Unmarshal(body, &got), json.Unmarshal(body, &want)
	if (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("%s: error %v, encoding/json's %v", body, gotErr, wantErr)
	}
	if gotErr == nil && !reflect.DeepEqual(got, JobBatch(want)) {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		t.Fatalf("%s:\n decoded %s\n encoding/json %s", body, g, w)
	}
}

func FuzzBatchDecodeMatchesEncodingJSON(f *testing.F) {
	for _, body := range batchBodies {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { assertBatchDecode(t, body) })
}
