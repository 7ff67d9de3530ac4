package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/gendurable/gendurable/webhook"
)

// Through the HTTP API of the real server: debounced inserts answer the pending job
// (200, debounced: true) with the latest input and a pushed-back eligible_at, in POST
// /v1/jobs and in a batch; the job runs once, with the latest input; a debounce with a
// key is a 422 naming the field.
func TestDebounceThroughTheServer(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	inputs := map[int64][]string{}
	f := startFlowServer(t, "digest", func(req *webhook.StepRequest) {
		mu.Lock()
		inputs[req.Job.ID] = append(inputs[req.Job.ID], string(req.Job.Input))
		mu.Unlock()
	})
	base, srv, out := f.base, f.srv, f.out

	post := func(body string) (int, map[string]any) {
		t.Helper()
		status, b := send(t, "POST", base+"/v1/jobs", body)
		var m map[string]any
		if err := json.Unmarshal([]byte(b), &m); err != nil {
			t.Fatalf("POST /v1/jobs %s: %d %s", body, status, b)
		}
		return status, m
	}
	at := func(m map[string]any, field string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339Nano, m[field].(string))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	status, first := post(`{"handler": "digest", "input": {"n": 1}, "debounce": {"key": "user-7", "period": "1h", "max_wait": "2h"}}`)
	if status != http.StatusCreated || first["debounced"] != nil || first["debounce_key"] != "user-7" {
		t.Fatalf("first insert: %d %v", status, first)
	}
	if d := at(first, "eligible_at").Sub(at(first, "created_at")); d < time.Hour || d > time.Hour+time.Minute {
		t.Fatalf("first insert: eligible %s after creation, want 1h", d)
	}
	status, second := post(`{"handler": "digest", "input": {"n": 2}, "debounce": {"key": "user-7", "period": "1h", "max_wait": "2h"}}`)
	if status != http.StatusOK || second["debounced"] != true || second["id"] != first["id"] ||
		fmt.Sprint(second["input"]) != "map[n:2]" || !at(second, "eligible_at").After(at(first, "eligible_at")) {
		t.Fatalf("second insert: %d %v; want 200, debounced, job %v with input n=2 pushed back", status, second, first["id"])
	}
	status, batch := send(t, "POST", base+"/v1/jobs/batch", `{"jobs": [
		{"handler": "digest", "input": {"n": 3}, "debounce": {"key": "user-7", "period": "1h"}},
		{"handler": "digest", "input": {"n": 1}, "debounce": {"key": "user-9", "period": "50ms"}},
		{"handler": "digest", "input": {"n": 2}, "debounce": {"key": "user-9", "period": "50ms"}}]}`)
	var doc struct {
		Jobs []struct {
			ID        int64 `json:"id"`
			Debounced bool  `json:"debounced"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(batch), &doc); err != nil || status != http.StatusOK || len(doc.Jobs) != 3 {
		t.Fatalf("batch: %d %s", status, batch)
	}
	if int64(first["id"].(float64)) != doc.Jobs[0].ID || !doc.Jobs[0].Debounced || doc.Jobs[1].Debounced ||
		!doc.Jobs[2].Debounced || doc.Jobs[1].ID != doc.Jobs[2].ID {
		t.Fatalf("batch answers %+v: want item 0 on job %v, items 1 and 2 on one new job, 0 and 2 debounced", doc.Jobs, first["id"])
	}
	// user-9's job is due 50 ms after the batch: it runs once, with the batch's last input.
	id := doc.Jobs[1].ID
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if call(t, "GET", fmt.Sprintf("%s/v1/jobs/%d", base, id), "")["status"] == "done" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the debounced job %d did not run within 30 s\n%s", id, out.String())
		}
	}
	mu.Lock()
	got := fmt.Sprint(inputs[id])
	mu.Unlock()
	if got != `[{"n": 2}]` {
		t.Fatalf("the webhook saw inputs %s for job %d, want one step with {\"n\": 2}", got, id)
	}

	status, body := send(t, "POST", base+"/v1/jobs", `{"handler": "digest", "key": "k", "debounce": {"key": "user-7", "period": "1h"}}`)
	var problem struct {
		Errors []struct{ Field string } `json:"errors"`
	}
	_ = json.Unmarshal([]byte(body), &problem)
	if status != http.StatusUnprocessableEntity || len(problem.Errors) != 1 || problem.Errors[0].Field != "debounce" {
		t.Fatalf("debounce with a key: %d %s, want 422 naming debounce", status, body)
	}
	stopServer(t, srv, out)
}
