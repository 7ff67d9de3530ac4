package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/httpapi"
)

// insertJobs inserts n jobs of handler h in queue q (keys prefix-0…) and returns their ids.
func (a *api) insertJobs(n int, q, h, prefix string) []int64 {
	a.t.Helper()
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf(`{"handler": %q, "queue": %q, "key": "%s%d"}`, h, q, prefix, i)
	}
	body := `{"jobs": [` + strings.Join(items, ",") + `]}`
	r := a.do("POST", "/v1/jobs/batch", body)
	if r.status != 200 {
		a.t.Fatalf("batch insert: %d %s", r.status, r.body)
	}
	var out struct{ Jobs []struct{ ID int64 } }
	if err := json.Unmarshal(r.body, &out); err != nil {
		a.t.Fatal(err)
	}
	ids := make([]int64, n)
	for i, j := range out.Jobs {
		ids[i] = j.ID
	}
	return ids
}

// bulk posts a bulk action and decodes its answer.
func (a *api) bulk(action, body string) (changed int, more bool) {
	a.t.Helper()
	r := a.do("POST", "/v1/jobs/"+action, body)
	if r.status != 200 {
		a.t.Fatalf("%s %s: %d %s", action, body, r.status, r.body)
	}
	var out struct {
		Changed *int
		More    *bool
	}
	if err := json.Unmarshal(r.body, &out); err != nil || out.Changed == nil || out.More == nil {
		a.t.Fatalf("%s: answer %s", action, r.body)
	}
	return *out.Changed, *out.More
}

// statusCount counts the jobs in status st matching an SQL condition.
func (a *api) statusCount(st, cond string) int64 {
	a.t.Helper()
	n, err := a.db.QueryInt(context.Background(), "SELECT count(*) FROM jobs WHERE status = $1 AND "+cond, st)
	if err != nil {
		a.t.Fatal(err)
	}
	return n
}

// claim leases up to n runnable steps of queue q, as a dispatcher would.
func (a *api) claim(q string, n int) []engine.Step {
	a.t.Helper()
	steps, _, err := a.eng.Claim(context.Background(), q, n)
	if err != nil {
		a.t.Fatal(err)
	}
	return steps
}

// outcome answers a claimed step over the API (the asynchronous-step path).
func (a *api) outcome(s engine.Step, answer string) {
	a.t.Helper()
	r := a.do("POST", fmt.Sprintf("/v1/jobs/%d/outcome", s.ID), fmt.Sprintf(`{"token": %q, %s}`, s.LeaseToken, answer))
	if r.status != 200 {
		a.t.Fatalf("outcome of job %d: %d %s", s.ID, r.status, r.body)
	}
}

// A bulk cancel takes at most limit jobs per call and says when more remain; filters
// narrow it; executing jobs are flagged (counted once, not taken again) and their
// children are cancelled with their parents.
func TestBulkCancelBoundsFiltersAndTrees(t *testing.T) {
	t.Parallel()
	a := newAPI(t, httpapi.Config{})
	a.registerHandler("h")
	a.registerHandler("other")
	a.insertJobs(25, "bulk", "h", "order-")
	a.insertJobs(5, "bulk", "other", "other-")
	a.insertJobs(5, "elsewhere", "h", "elsewhere-")

	// Bounded: 10, 10, 5, then nothing left.
	body := `{"filter": {"queue": "bulk", "handler": "h"}, "limit": 10}`
	for i, want := range []struct {
		changed int
		more    bool
	}{{10, true}, {10, true}, {5, false}, {0, false}} {
		changed, more := a.bulk("cancel", body)
		if changed != want.changed || more != want.more {
			t.Fatalf("call %d: changed=%d more=%v, want %d %v", i, changed, more, want.changed, want.more)
		}
	}
	if n := a.statusCount("cancelled", "queue = 'bulk' AND handler = 'h' AND cancelled_while = 'runnable'"); n != 25 {
		t.Fatalf("cancelled: %d, want 25", n)
	}
	if n := a.statusCount("runnable", "true"); n != 10 {
		t.Fatalf("runnable left: %d, want the 10 of other filters", n)
	}

	// Key prefix and status: claim 2 of "elsewhere" so they execute; cancel the
	// executing ones only.
	steps := a.claim("elsewhere", 2)
	if len(steps) != 2 {
		t.Fatalf("claimed %d", len(steps))
	}
	body = `{"filter": {"key_prefix": "elsewhere-", "status": ["executing"]}}`
	if changed, more := a.bulk("cancel", body); changed != 2 || more {
		t.Fatalf("executing: changed=%d more=%v, want 2 false", changed, more)
	}
	if n := a.statusCount("executing", "cancel_requested"); n != 2 {
		t.Fatalf("flagged executing: %d, want 2", n)
	}
	if changed, _ := a.bulk("cancel", body); changed != 0 {
		t.Fatalf("flagged jobs counted again: %d", changed)
	}
	// The flagged steps end as cancelled at their outcome.
	a.outcome(steps[0], `"next": {}`)
	if n := a.statusCount("cancelled", fmt.Sprintf("id = %d", steps[0].ID)); n != 1 {
		t.Fatal("a flagged step's outcome did not end it as cancelled")
	}

	// Trees: a parent of queue "tree" spawns 3 children in queue "kids"; cancelling by
	// the parent's queue cancels the children too, and counts them.
	a.insertJobs(1, "tree", "h", "parent-")
	parent := a.claim("tree", 1)
	a.outcome(parent[0], `"spawn": {"children": [{"handler": "h", "queue": "kids"}, {"handler": "h", "queue": "kids"}, {"handler": "other", "queue": "kids"}]}`)
	if changed, more := a.bulk("cancel", `{"filter": {"queue": "tree"}}`); changed != 4 || more {
		t.Fatalf("tree: changed=%d more=%v, want 4 (the parent and its 3 children) false", changed, more)
	}
	if n := a.statusCount("cancelled", "queue = 'kids'"); n != 3 {
		t.Fatalf("children cancelled: %d, want 3", n)
	}
	if n := a.statusCount("cancelled", fmt.Sprintf("id = %d AND cancelled_while = 'awaiting_children'", parent[0].ID)); n != 1 {
		t.Fatal("the parent is not cancelled while awaiting its children")
	}

	// created range: nothing created in the far past.
	if changed, more := a.bulk("cancel", `{"filter": {"created_before": "2001-01-01T00:00:00Z"}}`); changed != 0 || more {
		t.Fatalf("created_before 2001: changed=%d more=%v", changed, more)
	}
	// all: true takes everything live that is left.
	if changed, more := a.bulk("cancel", `{"filter": {"all": true}, "limit": 10000}`); changed != 8 || more {
		t.Fatalf("all: changed=%d more=%v, want 8 (5 other, 3 elsewhere) false", changed, more)
	}
}

// A bulk retry retries only failed and cancelled jobs, bounded, and leaves alone a job
// whose key a live job holds.
func TestBulkRetry(t *testing.T) {
	t.Parallel()
	a := newAPI(t, httpapi.Config{})
	a.registerHandler("h")
	a.insertJobs(6, "r", "h", "job-")
	steps := a.claim("r", 2)
	for _, s := range steps {
		a.outcome(s, `"fail": {"error": "boom"}`)
	}
	if changed, _ := a.bulk("cancel", `{"filter": {"queue": "r"}, "limit": 2}`); changed != 2 {
		t.Fatalf("cancel 2: %d", changed)
	}
	// 2 failed, 2 cancelled, 2 runnable. A live job takes the key of one failed job.
	if r := a.do("POST", "/v1/jobs", fmt.Sprintf(`{"handler": "h", "queue": "r", "key": %q}`, *steps[0].Key)); r.status != 201 {
		t.Fatalf("insert with a freed key: %d %s", r.status, r.body)
	}
	if changed, more := a.bulk("retry", `{"filter": {"queue": "r", "status": ["failed"]}}`); changed != 1 || more {
		t.Fatalf("retry failed: changed=%d more=%v, want 1 (the other's key is held) false", changed, more)
	}
	if changed, more := a.bulk("retry", `{"filter": {"queue": "r"}, "limit": 1}`); changed != 1 || !more {
		t.Fatalf("retry limit 1: changed=%d more=%v, want 1 true", changed, more)
	}
	if changed, more := a.bulk("retry", `{"filter": {"queue": "r"}}`); changed != 1 || more {
		t.Fatalf("retry rest: changed=%d more=%v, want 1 false", changed, more)
	}
	if n := a.statusCount("runnable", "queue = 'r' AND attempt = 0"); n != 6 {
		t.Fatalf("runnable: %d, want 6 (2 never ran, 1 new, 3 retried)", n)
	}
	if n := a.statusCount("failed", "true"); n != 1 {
		t.Fatalf("failed left: %d, want the one whose key is held", n)
	}
}

// Two bulk cancels of the same jobs at once count each job once between them.
func TestBulkCancelConcurrentCountsOnce(t *testing.T) {
	t.Parallel()
	a := newAPI(t, httpapi.Config{})
	a.registerHandler("h")
	a.insertJobs(2000, "c", "h", "c-")
	a.claim("c", 100) // executing ones are flagged once too
	total := 0
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				changed, more := a.bulk("cancel", `{"filter": {"queue": "c"}, "limit": 300}`)
				mu.Lock()
				total += changed
				mu.Unlock()
				if !more {
					return
				}
			}
		}()
	}
	wg.Wait()
	if total != 2000 {
		t.Fatalf("four concurrent bulk cancels counted %d changes of 2000 jobs", total)
	}
	if n := a.statusCount("cancelled", "true") + a.statusCount("executing", "cancel_requested"); n != 2000 {
		t.Fatalf("cancelled or flagged: %d, want 2000", n)
	}
}

// Every bad bulk request answers 422 naming the field, and changes nothing.
func TestBulkRefusals(t *testing.T) {
	t.Parallel()
	a := newAPI(t, httpapi.Config{})
	a.registerHandler("h")
	a.insertJobs(3, "q", "h", "k-")
	cases := []struct{ action, body, field string }{
		{"cancel", `{"filter": {}}`, "filter"},
		{"retry", `{"filter": {}}`, "filter"},
		{"cancel", `{"filter": {"all": false}}`, "filter"},
		{"cancel", `{"filter": {"all": true, "queue": "q"}}`, "filter/all"},
		{"cancel", `{"filter": {"status": ["done"]}}`, "filter/status/0"},
		{"retry", `{"filter": {"status": ["runnable"]}}`, "filter/status/0"},
		{"cancel", `{"filter": {"created_after": "2030-01-01T00:00:00Z", "created_before": "2020-01-01T00:00:00Z"}}`, "filter/created_before"},
		{"cancel", `{"filter": {"queue": "q"}, "limit": 10001}`, "limit"},
		{"cancel", `{"filter": {"queue": "q"}, "limit": 0}`, "limit"},
		{"cancel", `{"filter": {"queue": "bad queue"}}`, "filter/queue"},
		{"cancel", `{"filter": {"quue": "q"}}`, "filter/quue"},
		{"cancel", `{}`, "filter"},
	}
	for _, c := range cases {
		r := a.do("POST", "/v1/jobs/"+c.action, c.body)
		if r.status != 422 || r.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s %s: %d %s, want a 422 problem", c.action, c.body, r.status, r.body)
			continue
		}
		var p struct{ Errors []struct{ Field string } }
		_ = json.Unmarshal(r.body, &p)
		named := false
		for _, e := range p.Errors {
			named = named || e.Field == c.field
		}
		if !named {
			t.Errorf("%s %s: the problem does not name %q: %s", c.action, c.body, c.field, r.body)
		}
	}
	if n := a.statusCount("runnable", "true"); n != 3 {
		t.Fatalf("refused requests changed jobs: %d runnable of 3", n)
	}
}

// A tree cancelled in bulk and retried in bulk resumes as it was: the children run
// again and the parent waits for them (its retried children count as live).
func TestBulkRetryOfACancelledTree(t *testing.T) {
	t.Parallel()
	a := newAPI(t, httpapi.Config{})
	a.registerHandler("h")
	a.insertJobs(1, "tree", "h", "parent-")
	parent := a.claim("tree", 1)
	a.outcome(parent[0], `"spawn": {"children": [{"handler": "h"}, {"handler": "h"}, {"handler": "h"}]}`)
	if changed, _ := a.bulk("cancel", `{"filter": {"queue": "tree"}}`); changed != 4 {
		t.Fatalf("cancel the tree: %d, want 4", changed)
	}
	if changed, more := a.bulk("retry", `{"filter": {"queue": "tree"}}`); changed != 4 || more {
		t.Fatalf("retry the tree: changed=%d more=%v, want 4 false", changed, more)
	}
	if n := a.statusCount("runnable", fmt.Sprintf("parent_id = %d", parent[0].ID)); n != 3 {
		t.Fatalf("children runnable again: %d, want 3", n)
	}
	if n := a.statusCount("awaiting", fmt.Sprintf("id = %d AND pending_children = 3", parent[0].ID)); n != 1 {
		t.Fatal("the parent does not wait for its 3 retried children")
	}
	// The children finish: the parent is woken with wake "children".
	kids := a.claim("tree", 3)
	if len(kids) != 3 {
		t.Fatalf("claimed %d children", len(kids))
	}
	for _, k := range kids {
		a.outcome(k, `"done": {}`)
	}
	if n := a.statusCount("runnable", fmt.Sprintf("id = %d AND wake = 'children'", parent[0].ID)); n != 1 {
		t.Fatal("the parent was not woken by its children")
	}
}
