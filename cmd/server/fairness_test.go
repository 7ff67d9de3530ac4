package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
	"github.com/gendurable/gendurable/webhook"
)

// tenantCalls is the tenants' webhook: it keeps the order in which steps of each key
// arrived and the most steps of each key in flight at once, across every server.
type tenantCalls struct {
	mu       sync.Mutex
	order    []string
	inFlight map[string]int
	most     map[string]int
}

// step is the webhook's handler (a function literal: it takes its time over a step).
func (c *tenantCalls) step() func(context.Context, *webhook.StepRequest) webhook.Response {
	return func(_ context.Context, req *webhook.StepRequest) webhook.Response {
		var in struct {
			Key string `json:"key"`
		}
		_ = json.Unmarshal(req.Job.Input, &in)
		c.mu.Lock()
		c.order = append(c.order, in.Key)
		c.inFlight[in.Key]++
		c.most[in.Key] = max(c.most[in.Key], c.inFlight[in.Key])
		c.mu.Unlock()
		time.Sleep(2 * time.Millisecond) // a little work, so that steps overlap
		c.mu.Lock()
		c.inFlight[in.Key]--
		c.mu.Unlock()
		return webhook.Response{Done: &webhook.Done{}}
	}
}

// sharesOfFirst answers how many of the first n steps of keys a and b were a's and b's.
func (c *tenantCalls) sharesOfFirst(n int, a, b string) (na, nb int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range c.order {
		if na+nb == n {
			break
		}
		switch k {
		case a:
			na++
		case b:
			nb++
		}
	}
	return na, nb
}

// Three server processes drain one fair queue: keys weighted 3:1 take their steps 3:1
// while both have work, whichever process claims them, and a key capped at 2 never has
// more than 2 steps executing across the three.
func TestFairShareAcrossThreeServers(t *testing.T) {
	t.Parallel()
	const servers, heavy, light, capped = 3, 600, 200, 60
	bin := build(t, t.TempDir(), "./cmd/server")
	dbURL := pgtest.NewDatabase(t)
	const secret = "whsec_ZmFpci1zaGFyZS1hY3Jvc3MtdGhyZWUtc2VydmVycw=="
	calls := &tenantCalls{inFlight: map[string]int{}, most: map[string]int{}}
	hook := httptest.NewServer(webhook.Handler(secret, calls.step()))
	t.Cleanup(hook.Close)

	var bases []string
	for range servers {
		addr, out := freeAddr(t), newOutput(t)
		srv := startProcess(t, bin, out, "DATABASE_URL="+dbURL, "GENDURABLE_ADDR="+addr,
			"GENDURABLE_ALLOW_PRIVATE_WEBHOOKS=true")
		waitReady(t, "http://"+addr+"/readyz", srv, out)
		bases = append(bases, "http://"+addr)
	}
	call(t, "PUT", bases[0]+"/v1/handlers/tenant", fmt.Sprintf(`{"url": %q, "secret": %q}`, hook.URL+"/steps", secret))
	// Paused while the backlogs go in, so that every key has work from the first claim.
	call(t, "PUT", bases[1]+"/v1/queues/tenants", `{"fairness": "round_robin", "max_in_flight": 48, "batch": 16, "paused": true}`)
	call(t, "PUT", bases[2]+"/v1/queues/tenants/fairness-keys/heavy", `{"weight": 3}`)
	call(t, "PUT", bases[0]+"/v1/queues/tenants/fairness-keys/capped", `{"max_in_flight": 2}`)
	for key, n := range map[string]int{"heavy": heavy, "light": light, "capped": capped} {
		jobs := make([]string, n)
		for i := range jobs {
			jobs[i] = fmt.Sprintf(`{"handler": "tenant", "queue": "tenants", "fairness_key": %q, "input": {"key": %q}}`, key, key)
		}
		call(t, "POST", bases[1]+"/v1/jobs/batch", `{"jobs": [`+strings.Join(jobs, ",")+`]}`)
	}
	call(t, "PUT", bases[2]+"/v1/queues/tenants", `{"paused": false}`)

	db := pgtest.Open(t, dbURL, pg.Options{MaxConns: 1})
	for deadline := time.Now().Add(120 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		rows, err := db.QueryStrings(context.Background(), `SELECT count(*)::text FROM jobs WHERE queue = 'tenants' AND status = 'done'`)
		if err != nil {
			t.Fatal(err)
		}
		if rows[0][0] == fmt.Sprint(heavy+light+capped) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s of %d jobs done in 120 s", rows[0][0], heavy+light+capped)
		}
	}
	// Both weighted keys have work until about their last steps: look at the first 3/4.
	h, l := calls.sharesOfFirst((heavy+light)*3/4, "heavy", "light")
	ratio := float64(h) / float64(l)
	calls.mu.Lock()
	defer calls.mu.Unlock()
	t.Logf("%d servers: of the first %d steps of the 3:1 keys, %d and %d (%.2f); the capped key had at most %d in flight",
		servers, h+l, h, l, ratio, calls.most["capped"])
	if ratio < 3*0.85 || ratio > 3*1.15 {
		t.Errorf("keys weighted 3:1 took their steps %d:%d (%.2f), not 3:1 within 15 %%", h, l, ratio)
	}
	if calls.most["capped"] > 2 {
		t.Errorf("the key capped at 2 had %d steps in flight at once", calls.most["capped"])
	}
	if len(calls.order) != heavy+light+capped {
		t.Errorf("%d steps ran for %d jobs: a step ran twice", len(calls.order), heavy+light+capped)
	}
}
