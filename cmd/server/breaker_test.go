package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
	"github.com/gendurable/gendurable/webhook"
)

// metricSum adds up one metric's samples whose labels contain all of labels, across the
// /metrics pages of bases.
func metricSum(t *testing.T, bases []string, name string, labels ...string) float64 {
	t.Helper()
	line := regexp.MustCompile(`^` + name + `(\{[^}]*\})? (\S+)$`)
	total := 0.0
	for _, base := range bases {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
	samples:
		for _, l := range strings.Split(string(b), "\n") {
			m := line.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			for _, want := range labels {
				if !strings.Contains(m[1], want) {
					continue samples
				}
			}
			v, _ := strconv.ParseFloat(m[2], 64)
			total += v
		}
	}
	return total
}

// Three server processes share one database and a dead endpoint (503) with a backlog of
// 300 steps. Once the breaker is open the endpoint gets one probe per interval, not one
// per process: each probe at least an interval after the previous one, and exactly the
// probes the processes counted. The state is in the API and in every process's
// /metrics; when the endpoint heals, the next probe closes the breaker and the whole
// backlog runs; no process logs an error.
func TestBreakerProbesOncePerIntervalAcrossThreeServers(t *testing.T) {
	t.Parallel()
	const servers, backlog, interval = 3, 300, 400 * time.Millisecond
	bin := build(t, t.TempDir(), "./cmd/server")
	dbURL := pgtest.NewDatabase(t)
	const secret = "whsec_YnJlYWtlci1hY3Jvc3MtdGhyZWUtc2VydmVycw=="
	var healed atomic.Bool
	var mu sync.Mutex
	var arrivals []time.Time
	heal := webhook.Handler(secret, func(context.Context, *webhook.StepRequest) webhook.Response {
		return webhook.Response{Done: &webhook.Done{}}
	})
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
		if !healed.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		heal.ServeHTTP(w, r)
	}))
	t.Cleanup(hook.Close)
	requests := func() []time.Time {
		mu.Lock()
		defer mu.Unlock()
		return append([]time.Time(nil), arrivals...)
	}

	var bases []string
	var logs []output
	for range servers {
		addr, out := freeAddr(t), newOutput(t)
		srv := startProcess(t, bin, out, "DATABASE_URL="+dbURL, "GENDURABLE_ADDR="+addr,
			"GENDURABLE_ALLOW_PRIVATE_WEBHOOKS=true")
		waitReady(t, "http://"+addr+"/readyz", srv, out)
		bases = append(bases, "http://"+addr)
		logs = append(logs, out)
	}
	call(t, "PUT", bases[0]+"/v1/handlers/dead", fmt.Sprintf(`{"url": %q, "secret": %q, "max_attempts": 1000,
		"backoff_base": "10ms", "backoff_max": "10ms",
		"breaker": {"threshold": 5, "probe_interval": %q, "probe_interval_max": %q, "pause_after": "0s"}}`,
		hook.URL+"/steps", secret, interval, interval))
	jobs := make([]string, backlog)
	for i := range jobs {
		jobs[i] = `{"handler": "dead"}`
	}
	call(t, "POST", bases[1]+"/v1/jobs/batch", `{"jobs": [`+strings.Join(jobs, ",")+`]}`)

	breaker := func(base string) map[string]any {
		return call(t, "GET", base+"/v1/handlers/dead", "")["breaker"].(map[string]any)
	}
	db := pgtest.Open(t, dbURL, pg.Options{MaxConns: 1})
	ctx := context.Background()
	waitFor := func(timeout time.Duration, what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(timeout); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %s", what, timeout)
			}
		}
	}
	waitFor(60*time.Second, "the breaker opens", func() bool { return breaker(bases[2])["state"] != "closed" })
	waitFor(60*time.Second, "no step in flight", func() bool {
		n, err := db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE status = 'executing'`)
		return err == nil && n == 0
	})
	before := len(requests())
	probesBefore := metricSum(t, bases, "gendurable_breaker_probes_total", `handler="dead"`)
	const wantProbes = 6
	waitFor(60*time.Second, "six probes", func() bool { return len(requests()) >= before+wantProbes })
	reqs := requests()[before:]
	waitFor(10*time.Second, "the processes count the probes", func() bool {
		return metricSum(t, bases, "gendurable_breaker_probes_total", `handler="dead"`)-probesBefore >= float64(len(reqs))
	})
	probes := metricSum(t, bases, "gendurable_breaker_probes_total", `handler="dead"`) - probesBefore
	for i := 1; i < len(reqs); i++ {
		if gap := reqs[i].Sub(reqs[i-1]); gap < interval-20*time.Millisecond {
			t.Fatalf("calls %d and %d of the open breaker came %s apart, under its %s interval", i-1, i, gap, interval)
		}
	}
	if now := len(requests()) - before; probes < float64(len(reqs)) || probes > float64(now)+1 {
		t.Fatalf("%d calls reached the endpoint while %v probes were sent: a process called an open handler", now, probes)
	}
	var sinceOpen int64
	if n, err := db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE status = 'runnable' AND handler = 'dead' AND eligible_at > now()`); err == nil {
		sinceOpen = n
	}
	t.Logf("%d servers: %d probes over %s (%.0f ms apart on average), %v counted by the processes; %d steps parked",
		servers, len(reqs), reqs[len(reqs)-1].Sub(reqs[0]).Round(time.Millisecond),
		float64(reqs[len(reqs)-1].Sub(reqs[0]).Milliseconds())/float64(len(reqs)-1), probes, sinceOpen)
	if n := metricSum(t, bases, "gendurable_breaker_opens_total", `handler="dead"`); n != 1 {
		t.Errorf("gendurable_breaker_opens_total summed over the processes = %v, want 1", n)
	}
	waitFor(30*time.Second, "every process reports the open breaker", func() bool {
		return metricSum(t, bases, "gendurable_handler_breaker_state", `handler="dead"`, `state="closed"`) == 0 &&
			metricSum(t, bases, "gendurable_handler_breaker_state", `handler="dead"`) == servers
	})
	b := breaker(bases[0])
	if b["opens"] != float64(1) || b["opened_at"] == nil || b["paused"] != false {
		raw, _ := json.Marshal(b)
		t.Fatalf("open breaker in the API: %s", raw)
	}

	healed.Store(true)
	waitFor(90*time.Second, "the backlog done once the endpoint heals", func() bool {
		n, err := db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE status = 'done'`)
		return err == nil && n == backlog
	})
	if b := breaker(bases[1]); b["state"] != "closed" || b["consecutive_failures"] != float64(0) {
		raw, _ := json.Marshal(b)
		t.Fatalf("breaker after the endpoint healed: %s", raw)
	}
	for i, l := range logs {
		if s := l.String(); strings.Contains(s, "level=ERROR") || strings.Contains(s, `"level":"ERROR"`) {
			t.Errorf("server %d logged an error:\n%s", i, s)
		}
	}
}
