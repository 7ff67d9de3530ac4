package httpapi

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
)

// fill sets every field of v (a pointer to a struct) to a non-zero value, recursively,
// so that a field appendJob does not write shows up as a key encoding/json has and it lacks.
func fill(t *testing.T, v reflect.Value, n *int) {
	t.Helper()
	*n++
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, v.Elem(), n)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Date(2026, 12, 1, 10, 0, *n, 123456789, time.FixedZone("x", 3600))))
			return
		}
		for i := range v.NumField() {
			fill(t, v.Field(i), n)
		}
	case reflect.String:
		v.SetString("s<&>\"\\\u2028é" + string(rune('a'+*n%26)))
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(int64(*n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 { // NullableJSON
			v.SetBytes([]byte(`{"n": [1, 2.5, "x"], "ok": true}`))
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fill(t, v.Index(i), n)
		}
	default:
		t.Fatalf("fill: a field of kind %s: teach the test (and appendJob) about it", v.Kind())
	}
}

func TestAppendJobMatchesEncodingJSON(t *testing.T) {
	var full Job
	n := 0
	fill(t, reflect.ValueOf(&full).Elem(), &n)
	awaitingNone := Job{Awaiting: new([]string)} // an empty pointer target: encoding/json writes null
	for name, j := range map[string]Job{"every field set": full, "every field empty": {}, "awaiting of no names": awaitingNone} {
		for _, dedup := range []bool{false, true} {
			debounced := dedup // both flags false, then both true
			want, err := json.Marshal(jobInsertedBody{Job: j, Deduplicated: dedup, Debounced: debounced})
			if err != nil {
				t.Fatal(err)
			}
			got := appendJob(nil, &timeMemo{}, &j, &dedup, debounced)
			var wantDoc, gotDoc map[string]any
			if err := json.Unmarshal(want, &wantDoc); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(got, &gotDoc); err != nil {
				t.Fatalf("%s: appendJob wrote invalid JSON: %v\n%s", name, err, got)
			}
			if !reflect.DeepEqual(gotDoc, wantDoc) {
				t.Errorf("%s: appendJob differs from encoding/json\n got: %s\nwant: %s", name, got, want)
			}
		}
	}
	// Jobs sharing their times and not (the same instant in two locations among them):
	// each as encoding/json writes it.
	at := time.Date(2026, 12, 1, 10, 0, 0, 5, time.UTC)
	later := at.Add(time.Millisecond)
	batch := []engine.JobInserted{{Job: engine.Job{ID: 1, CreatedAt: at, UpdatedAt: at, EligibleAt: &at}},
		{Job: engine.Job{ID: 2, CreatedAt: at, UpdatedAt: later, EligibleAt: &later}},
		{Job: engine.Job{ID: 3, CreatedAt: at.In(time.FixedZone("x", 3600)), UpdatedAt: at, EligibleAt: &at}, Deduplicated: true}}
	var answer struct{ Jobs []json.RawMessage }
	if err := json.Unmarshal(encodeInsertedJobs(batch), &answer); err != nil || len(answer.Jobs) != len(batch) {
		t.Fatalf("encodeInsertedJobs: %v, %d jobs", err, len(answer.Jobs))
	}
	for i := range batch {
		want, _ := json.Marshal(jobInsertedBody{Job: jobBody(&batch[i].Job), Deduplicated: batch[i].Deduplicated})
		var wantDoc, gotDoc map[string]any
		_ = json.Unmarshal(want, &wantDoc)
		_ = json.Unmarshal(answer.Jobs[i], &gotDoc)
		if !reflect.DeepEqual(gotDoc, wantDoc) {
			t.Errorf("job %d of the batch:\n got: %s\nwant: %s", i+1, answer.Jobs[i], want)
		}
	}
	// The whole answer: an object holding the array.
	var doc struct{ Jobs []map[string]any }
	if err := json.Unmarshal(encodeInsertedJobs([]engine.JobInserted{{Job: engine.Job{ID: 7}}, {Deduplicated: true}}), &doc); err != nil || len(doc.Jobs) != 2 ||
		doc.Jobs[0]["id"] != 7.0 || doc.Jobs[1]["deduplicated"] != true {
		t.Fatalf("encodeInsertedJobs: %v %+v", err, doc)
	}
}

// encodeInsertedJobs is the batch endpoint's answer for jobs.
func encodeInsertedJobs(jobs []engine.JobInserted) []byte {
	e := newInsertedEncoder(len(jobs))
	for i := range jobs {
		e.add(&jobs[i])
	}
	return *e.finish().body
}
