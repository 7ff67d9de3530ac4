package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
	"github.com/gendurable/gendurable/internal/pgbouncertest"
	"github.com/gendurable/gendurable/internal/webhooktest"
	"github.com/gendurable/gendurable/webhook"
)

// The core flow through a real PgBouncer in transaction mode, as PgBouncer 1.18 has it
// (no protocol-level prepared statements), four server connections shared by two server
// processes of eight connections each: handlers registered, jobs inserted one by one and
// in batches by several clients at once, steps run (next, await a signal, signal, done),
// cancels and retries, jobs listed. No request may answer 5xx and every job must finish
// once. LISTEN goes to PostgreSQL directly (GENDURABLE_DIRECT_DATABASE_URL).
func TestCoreFlowThroughPgBouncer(t *testing.T) {
	t.Parallel()
	pgbouncertest.Require(t)
	const poolSize, servers, jobs = 4, 2, 300
	bin := build(t, t.TempDir(), "./cmd/server")
	dbURL := pgtest.NewDatabase(t)
	bouncer := pgbouncertest.Start(t, dbURL, pgbouncertest.Config{PoolSize: poolSize})
	f := newFlow(t, "flow")
	var logs []output
	began := time.Now()
	for range servers {
		addr, out := freeAddr(t), newOutput(t)
		srv := startProcess(t, bin, out, "DATABASE_URL="+bouncer.URL, "GENDURABLE_DB_POOLER=transaction",
			"GENDURABLE_DIRECT_DATABASE_URL="+dbURL, "GENDURABLE_DB_MAX_CONNS=8", "GENDURABLE_ADDR="+addr,
			"GENDURABLE_ALLOW_PRIVATE_WEBHOOKS=true", "GENDURABLE_SHUTDOWN_GRACE=5s")
		waitReady(t, "http://"+addr+"/readyz", srv, out)
		f.bases = append(f.bases, "http://"+addr)
		logs = append(logs, out)
	}
	started := time.Since(began)
	f.run(jobs, 8)
	t.Logf("PgBouncer %s, %d servers: started in %v; %d jobs (%d steps, %d API requests) in %v",
		bouncer.Version, servers, started.Round(time.Millisecond), jobs, len(f.hook.Calls()), f.requests(),
		f.took.Round(time.Millisecond))
	for i, l := range logs {
		if strings.Contains(l.String(), `"level":"ERROR"`) {
			t.Errorf("server %d logged errors:\n%s", i, l.String())
		}
	}

	// Pooled connections were shared: more clients than server connections.
	var clients, serverConns int
	for _, c := range bouncer.Show(t, "CLIENTS") {
		if c["database"] == bouncer.Database {
			clients++
		}
	}
	for _, s := range bouncer.Show(t, "SERVERS") {
		if s["database"] == bouncer.Database {
			serverConns++
		}
	}
	if serverConns > poolSize || clients <= serverConns {
		t.Errorf("PgBouncer served %d clients with %d server connections (pool %d)", clients, serverConns, poolSize)
	}
	// Each process LISTENs on direct connections: the dispatcher's and the scheduler's.
	direct := pgtest.Open(t, dbURL, pg.Options{MaxConns: 1})
	listeners, err := direct.QueryInt(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'gendurable-direct' AND query LIKE 'LISTEN %'`)
	if err != nil || listeners != 2*servers {
		t.Errorf("%d direct LISTEN connections (%v), want %d", listeners, err, 2*servers)
	}
	t.Logf("PgBouncer: %d clients on %d server connections", clients, serverConns)
	// JIT cannot be turned off through the pooler: the server says how to.
	if jit, err := direct.QueryStrings(context.Background(), "SHOW jit"); err == nil && jit[0][0] == "on" &&
		!strings.Contains(logs[0].String(), `ALTER ROLE \"postgres\" SET jit = off`) {
		t.Errorf("jit is on and the server does not warn:\n%s", logs[0].String())
	}
}

// Without GENDURABLE_DB_POOLER the server sends start-up parameters PgBouncer refuses:
// it stops at once, naming the parameter.
func TestPgBouncerNeedsThePoolerSetting(t *testing.T) {
	t.Parallel()
	pgbouncertest.Require(t)
	bin := build(t, t.TempDir(), "./cmd/server")
	bouncer := pgbouncertest.Start(t, pgtest.NewDatabase(t), pgbouncertest.Config{})
	logs := newOutput(t)
	srv := startProcess(t, bin, logs, "DATABASE_URL="+bouncer.URL, "GENDURABLE_ADDR="+freeAddr(t))
	select {
	case <-srv.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("the server runs through PgBouncer without GENDURABLE_DB_POOLER:\n%s", logs.String())
	}
	if srv.err == nil || !strings.Contains(logs.String(), "unsupported startup parameter") {
		t.Fatalf("exit %v, log:\n%s", srv.err, logs.String())
	}
}

// What each way of sending statements costs through PgBouncer 1.18 in transaction mode
// (a proxy counts the messages the server sends): the core flow at a smaller scale with
// pgx's exec modes, against the direct connection's named prepared statements. The
// pooler's default (cache_describe) must run the flow without a 5xx in about one round
// trip a statement; the others are reported.
func TestExecModesThroughPgBouncer(t *testing.T) {
	t.Parallel()
	pgbouncertest.Require(t)
	bin := build(t, t.TempDir(), "./cmd/server")
	modes := []struct {
		name, pooler, execMode string
		bouncer, mustWork      bool
	}{
		{"direct, cache_statement (the default)", "none", "", false, true},
		{"direct, cache_describe (GENDURABLE_DB_POOLER=transaction)", "transaction", "", false, true},
		{"pgbouncer, cache_describe (GENDURABLE_DB_POOLER=transaction)", "transaction", "", true, true},
		{"pgbouncer, cache_statement (named prepared statements)", "transaction", "cache_statement", true, false},
		{"pgbouncer, describe_exec", "transaction", "describe_exec", true, false},
		{"pgbouncer, exec", "transaction", "exec", true, false},
		{"pgbouncer, simple_protocol", "transaction", "simple_protocol", true, false},
	}
	for _, m := range modes {
		dbURL := pgtest.NewDatabase(t)
		target := dbURL
		if m.bouncer {
			target = pgbouncertest.Start(t, dbURL, pgbouncertest.Config{PoolSize: 4}).URL
		}
		proxy := pgbouncertest.NewProxy(t, target)
		proxied := proxy.URL(target)
		if m.execMode != "" {
			proxied += "&default_query_exec_mode=" + m.execMode
		}
		addr, logs := freeAddr(t), newOutput(t)
		srv := startProcess(t, bin, logs, "DATABASE_URL="+proxied, "GENDURABLE_DB_POOLER="+m.pooler,
			"GENDURABLE_DIRECT_DATABASE_URL="+dbURL, "GENDURABLE_DB_MAX_CONNS=8", "GENDURABLE_ADDR="+addr,
			"GENDURABLE_ALLOW_PRIVATE_WEBHOOKS=true", "GENDURABLE_SHUTDOWN_GRACE=5s")
		waitReady(t, "http://"+addr+"/readyz", srv, logs)
		// A first flow fills the connections' caches; the second is measured.
		warmUp := newFlow(t, "warmup")
		warmUp.bases, warmUp.tolerant = []string{"http://" + addr}, !m.mustWork
		warmUp.run(20, 4)
		before := proxy.Wire()
		f := newFlow(t, "flow")
		f.bases, f.tolerant = []string{"http://" + addr}, !m.mustWork
		f.run(60, 4)
		w := proxy.Wire().Since(before)
		rt, executing, _ := w.PerStatement()
		t.Logf("%-62s %v: %s; %s", m.name, f.took.Round(time.Millisecond), f.outcome(), w)
		if m.mustWork && (warmUp.failing() || f.failing()) {
			t.Logf("%s: the server's warnings and errors:\n%s", m.name, warningsOf(logs.String()))
		}
		if m.mustWork && (executing > 1 || rt > 1.25) {
			t.Errorf("%s: %.2f round trips a statement, %.2f executing", m.name, rt, executing)
		}
		stopServer(t, srv, logs)
	}
}

// flow drives the core flow against one or more servers and checks what it saw.
type flow struct {
	t        *testing.T
	handler  string   // the handler this flow registers and lists its jobs by
	bases    []string // the servers' API roots, used in turn
	tolerant bool     // a mode expected to fail: stop at the first 5xx instead of failing the test
	client   *http.Client
	hook     *webhooktest.Receiver

	mu           sync.Mutex
	calls        int
	serverErrors []string
	doneAnswers  map[int64]int  // done answers the handler gave, by job
	failedOnce   map[int64]bool // retry jobs failed on their first run
	badWakes     []string
	awaiting     chan awaited // jobs that answered await (signal or cancel them)
	failed       chan int64   // jobs that answered fail (retry them)
	problems     int
	took         time.Duration
	aborted      chan struct{}
	abortOnce    sync.Once
}

func newFlow(t *testing.T, handler string) *flow {
	f := &flow{t: t, handler: handler, client: &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
		doneAnswers: map[int64]int{}, failedOnce: map[int64]bool{},
		awaiting: make(chan awaited, 10000), failed: make(chan int64, 10000), aborted: make(chan struct{})}
	f.hook = webhooktest.New(t, f.step)
	return f
}

// kind is what job i does: "retry" fails once and is retried, "cancel" awaits and is
// cancelled, "signal" awaits a signal and finishes.
// awaited is a job that answered await, and whether its kind wants it cancelled (read
// from its input: the step can come before its insert's answer reached the client).
type awaited struct {
	id     int64
	cancel bool
}

func kind(i int) string {
	switch i % 5 {
	case 0:
		return "retry"
	case 1:
		return "cancel"
	}
	return "signal"
}

// step is the handler: next, then await "go", then done (a retry job fails first).
func (f *flow) step(w http.ResponseWriter, req *webhook.StepRequest) {
	var in struct{ Kind string }
	_ = json.Unmarshal(req.Job.Input, &in)
	id := req.Job.ID
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case in.Kind == "retry" && !f.failedOnce[id]:
		f.failedOnce[id] = true
		webhooktest.Answer(w, webhook.Response{Fail: &webhook.Fail{Error: json.RawMessage(`{"first":"run"}`)}})
		f.failed <- id
	case in.Kind == "retry":
		f.doneAnswers[id]++
		webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{Result: json.RawMessage(`{"retried":true}`)}})
	case req.Job.Step == 0:
		webhooktest.Answer(w, webhook.Response{Next: &webhook.Next{State: json.RawMessage(`{"n":1}`)}})
	case req.Job.Step == 1:
		webhooktest.Answer(w, webhook.Response{Await: &webhook.Await{Signals: []string{"go"},
			Timeout: webhook.Duration(time.Hour), State: json.RawMessage(`{"n":2}`)}})
		f.awaiting <- awaited{id: id, cancel: in.Kind == "cancel"}
	default:
		if req.Wake != "signal" || len(req.Signals) != 1 || req.Signals[0].Name != "go" {
			f.badWakes = append(f.badWakes, fmt.Sprintf("job %d step %d: wake %q, %d signals", id, req.Job.Step,
				req.Wake, len(req.Signals)))
		}
		f.doneAnswers[id]++
		webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{Result: json.RawMessage(`{"signalled":true}`)}})
	}
}

// call sends one API request to the next server and decodes a 2xx answer into out;
// a 5xx is recorded (and ends a tolerant flow), any other answer fails the test.
func (f *flow) call(method, path, body string, out any) int {
	f.mu.Lock()
	f.calls++
	base := f.bases[f.calls%len(f.bases)]
	f.mu.Unlock()
	req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		f.fail("%s %s: %v", method, path, err)
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	switch {
	case resp.StatusCode >= 500:
		f.mu.Lock()
		f.serverErrors = append(f.serverErrors, fmt.Sprintf("%s %s: %d %s", method, path, resp.StatusCode, b))
		f.problems++
		f.mu.Unlock()
		if f.tolerant {
			f.abortOnce.Do(func() { close(f.aborted) })
		}
	case resp.StatusCode >= 300:
		f.fail("%s %s: %d %s", method, path, resp.StatusCode, b)
	case out != nil:
		if err := json.Unmarshal(b, out); err != nil {
			f.fail("%s %s: %v: %s", method, path, err, b)
		}
	}
	return resp.StatusCode
}

// fail records a problem: a test failure, or in a tolerant flow a note that ends it.
func (f *flow) fail(format string, args ...any) {
	f.mu.Lock()
	f.problems++
	f.mu.Unlock()
	if !f.tolerant {
		f.t.Errorf(format, args...)
		return
	}
	f.mu.Lock()
	f.serverErrors = append(f.serverErrors, fmt.Sprintf(format, args...))
	f.mu.Unlock()
	f.abortOnce.Do(func() { close(f.aborted) })
}

func (f *flow) failing() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.problems > 0
}

func (f *flow) requests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// outcome summarises a flow for the log.
func (f *flow) outcome() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.serverErrors) == 0 {
		return fmt.Sprintf("%d requests, no 5xx", f.calls)
	}
	return fmt.Sprintf("%d requests, %d answered 5xx, first: %.200s", f.calls, len(f.serverErrors), f.serverErrors[0])
}

// run inserts n jobs (half one by one, half in batches of 25) from clients goroutines,
// signals, cancels and retries them from as many, and waits until every one has finished.
func (f *flow) run(n, clients int) {
	t := f.t
	began := time.Now()
	f.call("PUT", "/v1/handlers/"+f.handler, fmt.Sprintf(`{"url": %q, "secret": %q}`, f.hook.URL, webhooktest.Secret), nil)
	want := map[string]map[int64]bool{"done": {}, "cancelled": {}}
	var wantMu sync.Mutex
	inserted := func(i int, id int64) {
		wantMu.Lock()
		defer wantMu.Unlock()
		if kind(i) == "cancel" {
			want["cancelled"][id] = true
		} else {
			want["done"][id] = true
		}
	}
	jobBody := func(i int) string {
		return fmt.Sprintf(`{"handler": %q, "input": {"kind": %q}}`, f.handler, kind(i))
	}

	stop := make(chan struct{})
	var workers sync.WaitGroup
	for range clients {
		workers.Add(1)
		go func() { // signals and cancels the awaiting, retries the failed
			defer workers.Done()
			for {
				select {
				case <-stop:
					return
				case a := <-f.awaiting:
					// By the job's own kind: its insert's answer may not have reached want yet.
					if a.cancel {
						f.call("POST", fmt.Sprintf("/v1/jobs/%d/cancel", a.id), `{}`, nil)
					} else {
						f.call("POST", fmt.Sprintf("/v1/jobs/%d/signals", a.id), `{"name": "go", "payload": {}}`, nil)
					}
				case id := <-f.failed:
					f.retryWhenFailed(id)
				}
			}
		}()
	}
	var inserts sync.WaitGroup
	const batch = 25
	work := make(chan int)
	for range clients {
		inserts.Add(1)
		go func() {
			defer inserts.Done()
			for i := range work {
				if i < n/2 {
					var job struct{ ID int64 }
					if f.call("POST", "/v1/jobs", jobBody(i), &job) == 201 {
						inserted(i, job.ID)
					}
					continue
				}
				parts := make([]string, 0, batch)
				for j := i; j < min(i+batch, n); j++ {
					parts = append(parts, jobBody(j))
				}
				var out struct{ Jobs []struct{ ID int64 } }
				if f.call("POST", "/v1/jobs/batch", `{"jobs": [`+strings.Join(parts, ",")+`]}`, &out) == 200 {
					for j, job := range out.Jobs {
						inserted(i+j, job.ID)
					}
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		work <- i
		if i >= n/2 {
			i += batch - 1
		}
	}
	close(work)
	inserts.Wait()

	// Wait until the list shows every job finished as it should.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		got := map[string]map[int64]bool{"done": f.list("done"), "cancelled": f.list("cancelled")}
		if len(got["done"]) == len(want["done"]) && len(got["cancelled"]) == len(want["cancelled"]) {
			for status, ids := range want {
				for id := range ids {
					if !got[status][id] {
						f.fail("job %d is not listed as %s", id, status)
					}
				}
			}
			break
		}
		select {
		case <-f.aborted:
		case <-time.After(100 * time.Millisecond):
			if time.Now().Before(deadline) && !f.failing() {
				continue
			}
			f.fail("after %v: %d of %d done, %d of %d cancelled", time.Since(began).Round(time.Second),
				len(got["done"]), len(want["done"]), len(got["cancelled"]), len(want["cancelled"]))
		}
		break
	}
	close(stop)
	workers.Wait()
	f.took = time.Since(began)
	if f.tolerant {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.serverErrors) > 0 {
		t.Errorf("%d requests answered 5xx, first: %s", len(f.serverErrors), f.serverErrors[0])
	}
	for id := range want["done"] {
		if f.doneAnswers[id] != 1 {
			t.Errorf("job %d was answered done %d times", id, f.doneAnswers[id])
		}
	}
	for id := range want["cancelled"] {
		if f.doneAnswers[id] != 0 {
			t.Errorf("cancelled job %d ran to done", id)
		}
	}
	for _, w := range f.badWakes {
		t.Errorf("woken wrongly: %s", w)
	}
}

// retryWhenFailed retries job id once its failure is written.
func (f *flow) retryWhenFailed(id int64) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		var job struct{ Status string }
		if f.call("GET", fmt.Sprintf("/v1/jobs/%d", id), "", &job) != 200 {
			return
		}
		if job.Status == "failed" {
			f.call("POST", fmt.Sprintf("/v1/jobs/%d/retry", id), `{}`, nil)
			return
		}
		select {
		case <-f.aborted:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	f.fail("job %d did not fail within a minute", id)
}

// list pages through GET /v1/jobs for status and returns the ids.
func (f *flow) list(status string) map[int64]bool {
	ids := map[int64]bool{}
	cursor := ""
	for {
		var page struct {
			Jobs []struct {
				ID     int64
				Status string
			}
			NextCursor *string `json:"next_cursor"`
		}
		path := "/v1/jobs?handler=" + f.handler + "&limit=500&status=" + status
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		if f.call("GET", path, "", &page) != 200 {
			return ids
		}
		for _, j := range page.Jobs {
			if j.Status != status {
				f.fail("listed for status %s: job %d is %s", status, j.ID, j.Status)
			}
			ids[j.ID] = true
		}
		if page.NextCursor == nil {
			return ids
		}
		cursor = *page.NextCursor
	}
}

// GENDURABLE_DB_POOLER=transaction needs a direct URL for whatever holds session state.
func TestConfigPooler(t *testing.T) {
	t.Parallel()
	load := func(env map[string]string) (config, error) {
		env["DATABASE_URL"] = "postgres://bouncer"
		return loadConfig(nil, func(k string) string { return env[k] })
	}
	c, err := load(map[string]string{})
	if err != nil || c.DBPooler != pg.PoolerNone || c.DirectDatabaseURL != "" {
		t.Fatalf("default: %+v, %v", c, err)
	}
	_, err = load(map[string]string{"GENDURABLE_DB_POOLER": "transaction"})
	if err == nil || !strings.Contains(err.Error(), "GENDURABLE_DIRECT_DATABASE_URL") {
		t.Fatalf("a transaction pooler without a direct URL: %v", err)
	}
	c, err = load(map[string]string{"GENDURABLE_DB_POOLER": "transaction", "GENDURABLE_DIRECT_DATABASE_URL": "postgres://db"})
	if err != nil || c.DBPooler != pg.PoolerTransaction || c.DirectDatabaseURL != "postgres://db" {
		t.Fatalf("a transaction pooler with a direct URL: %+v, %v", c, err)
	}
	// An API-only process neither listens nor migrates.
	if _, err = load(map[string]string{"GENDURABLE_DB_POOLER": "transaction", "GENDURABLE_DISPATCH": "false",
		"GENDURABLE_MIGRATE": "false"}); err != nil {
		t.Fatalf("an API-only process behind a transaction pooler: %v", err)
	}
	if _, err = load(map[string]string{"GENDURABLE_DB_POOLER": "pgbouncer"}); err == nil ||
		!strings.Contains(err.Error(), `GENDURABLE_DB_POOLER="pgbouncer"`) {
		t.Fatalf("an unknown pooler: %v", err)
	}
}

// warningsOf keeps the WARN and ERROR lines of a server log.
func warningsOf(log string) string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, `"level":"WARN"`) || strings.Contains(line, `"level":"ERROR"`) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
