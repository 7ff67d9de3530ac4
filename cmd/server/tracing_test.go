package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/gendurable/gendurable/internal/pg/pgtest"
	"github.com/gendurable/gendurable/webhook"
)

// jaegerVersion is the Jaeger v2 the tracing tests export to, built from the Go module
// proxy (github.com/jaegertracing/jaeger/cmd/jaeger) once into the user's cache folder.
const jaegerVersion = "v1.75.0"

// jaegerBinary builds Jaeger (once per machine: under os.UserCacheDir, behind a file
// lock so that concurrent test binaries build it once) and answers its path. It skips the
// test when Jaeger cannot be built, saying why, except in CI (CI=true), where it fails.
func jaegerBinary(t *testing.T) string {
	t.Helper()
	fail := t.Skipf
	if os.Getenv("CI") != "" {
		fail = t.Fatalf
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		fail("no cache folder to build Jaeger into: %v", err)
	}
	dir := filepath.Join(cache, "gendurable-jaeger")
	bin := filepath.Join(dir, "jaeger-"+jaegerVersion)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if err := os.MkdirAll(filepath.Join(dir, "mod"), 0o755); err != nil {
		fail("cannot make %s: %v", dir, err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		fail("cannot lock the Jaeger build: %v", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		fail("cannot lock the Jaeger build: %v", err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // released at close anyway
	if _, err := os.Stat(bin); err == nil {
		return bin // built by another test binary while this one waited
	}
	t.Logf("building Jaeger %s into %s (once; a few minutes)", jaegerVersion, bin)
	mod := filepath.Join(dir, "mod")
	steps := [][]string{
		{"go", "get", "-tool", "github.com/jaegertracing/jaeger/cmd/jaeger@" + jaegerVersion},
		{"go", "build", "-o", bin + ".tmp", "github.com/jaegertracing/jaeger/cmd/jaeger"},
	}
	if _, err := os.Stat(filepath.Join(mod, "go.mod")); err != nil {
		steps = append([][]string{{"go", "mod", "init", "jaegerbuild"}}, steps...)
	}
	for _, s := range steps {
		cmd := exec.Command(s[0], s[1:]...)
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
		if out, err := cmd.CombinedOutput(); err != nil {
			fail("Jaeger %s cannot be built (%s: %v):\n%s", jaegerVersion, strings.Join(s, " "), err, out)
		}
	}
	if err := os.Rename(bin+".tmp", bin); err != nil {
		fail("%v", err)
	}
	return bin
}

// jaeger is a running Jaeger v2: OTLP over HTTP and over gRPC in, its query API out,
// traces in memory.
type jaeger struct {
	otlp, otlpGRPC, query string // host:port
}

func startJaeger(t *testing.T) *jaeger {
	t.Helper()
	bin := jaegerBinary(t)
	j := &jaeger{otlp: freeAddr(t), otlpGRPC: freeAddr(t), query: freeAddr(t)}
	config := fmt.Sprintf(`service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: %s
    grpc:
      endpoint: %s
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      http:
        endpoint: %s
      grpc:
        endpoint: %s
processors:
  batch:
    timeout: 50ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`, j.query, freeAddr(t), j.otlp, j.otlpGRPC)
	path := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	logs := newOutput(t)
	p := &process{cmd: exec.Command(bin, "--config", path), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = logs.File, logs.File
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); <-p.done })
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		select {
		case <-p.done:
			t.Fatalf("jaeger exited: %v\n%s", p.err, logs.String())
		default:
		}
		resp, err := http.Get("http://" + j.query + "/api/services")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("jaeger is not serving its query API at %s:\n%s", j.query, logs.String())
		}
	}
	waitListening(t, j.otlp)
	waitListening(t, j.otlpGRPC)
	return j
}

// jaegerSpan is a span as Jaeger's query API (/api/traces) answers it.
type jaegerSpan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	Tags []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
	StartTime int64  `json:"startTime"` // µs
	Duration  int64  `json:"duration"`  // µs
	ProcessID string `json:"processID"`
}

func (s *jaegerSpan) tag(key string) any {
	for _, t := range s.Tags {
		if t.Key == key {
			return t.Value
		}
	}
	return nil
}

// parent is the span id of s's CHILD_OF reference ("" for a root).
func (s *jaegerSpan) parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// linked lists the span ids s refers to other than its parent: its links.
func (s *jaegerSpan) linked() []string {
	var out []string
	for _, r := range s.References {
		if r.RefType != "CHILD_OF" {
			out = append(out, r.SpanID)
		}
	}
	return out
}

type jaegerTraces struct {
	Data []struct {
		TraceID   string       `json:"traceID"`
		Spans     []jaegerSpan `json:"spans"`
		Processes map[string]struct {
			ServiceName string `json:"serviceName"`
		} `json:"processes"`
	} `json:"data"`
}

func (j *jaeger) get(t *testing.T, path string) jaegerTraces {
	t.Helper()
	resp, err := http.Get("http://" + j.query + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out jaegerTraces
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusNotFound {
		return out
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("GET %s: %v\n%s", path, err, b)
	}
	return out
}

// traceUntil polls the trace until ready says it is complete, and answers its spans.
func (j *jaeger) traceUntil(t *testing.T, traceID string, ready func([]jaegerSpan) bool) []jaegerSpan {
	t.Helper()
	var spans []jaegerSpan
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		got := j.get(t, "/api/traces/"+traceID)
		spans = nil
		for _, d := range got.Data {
			spans = append(spans, d.Spans...)
		}
		if ready(spans) {
			return spans
		}
		if time.Now().After(deadline) {
			b, _ := json.MarshalIndent(spans, "", " ")
			t.Fatalf("trace %s is not complete in Jaeger after 60s; it holds:\n%s", traceID, b)
		}
	}
}

func byOperation(spans []jaegerSpan, name string) []jaegerSpan {
	var out []jaegerSpan
	for _, s := range spans {
		if s.OperationName == name {
			out = append(out, s)
		}
	}
	return out
}

// stepCall is what the test's handler saw of one webhook call.
type stepCall struct {
	handler        string
	step, attempt  int
	traceparent    string
	status         int
	contextTraceID string // the trace id of the context the SDK gave the step function
	contextSpanID  string // and its span id: with no SDK installed, the service's attempt span
}

// tracedHandlers serves the handlers flow and child with the Go SDK, recording every call.
// flow: step 0 next; step 1 answers 500 at its first attempt, next at its second; step 2
// spawns a child; step 3 (the child done) awaits the signal "go"; step 4 done. child: done.
type tracedHandlers struct {
	secret string
	mu     sync.Mutex
	calls  []stepCall
}

func newTracedHandlers(t *testing.T) (*tracedHandlers, *httptest.Server) {
	h := &tracedHandlers{secret: "whsec_" + base64.StdEncoding.EncodeToString([]byte("gendurable-tracing-test-secret!!"))}
	sdk := webhook.Handler(h.secret, func(ctx context.Context, req *webhook.StepRequest) webhook.Response {
		sc := trace.SpanContextFromContext(ctx)
		h.record(stepCall{handler: req.Job.Handler, step: req.Job.Step, attempt: req.Job.Attempt,
			traceparent: req.Traceparent, status: 200, contextTraceID: sc.TraceID().String(), contextSpanID: sc.SpanID().String()})
		if req.Job.Handler == "child" {
			return webhook.Response{Done: &webhook.Done{Result: json.RawMessage(`{"child":true}`)}}
		}
		switch req.Job.Step {
		case 0, 1:
			return webhook.Response{Next: &webhook.Next{}}
		case 2:
			return webhook.Response{Spawn: &webhook.Spawn{Children: []webhook.ChildSpec{{Handler: "child"}}}}
		case 3:
			return webhook.Response{Await: &webhook.Await{Signals: []string{"go"}}}
		default:
			return webhook.Response{Done: &webhook.Done{Result: json.RawMessage(`{"ok":true}`)}}
		}
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The first attempt of flow's step 1 fails with a 500 (a retry by the service).
		if id := r.Header.Get("Webhook-Id"); strings.Contains(id, "_step_1_attempt_1_") && r.URL.Path == "/flow" {
			h.record(stepCall{handler: "flow", step: 1, attempt: 1, traceparent: r.Header.Get("Traceparent"), status: 500})
			http.Error(w, "try again", http.StatusInternalServerError)
			return
		}
		sdk.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return h, srv
}

func (h *tracedHandlers) record(c stepCall) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, c)
}

func (h *tracedHandlers) seen() []stepCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.calls)
}

// request sends a JSON request with extra headers and decodes the 2xx answer.
func request(t *testing.T, method, url, body string, headers map[string]string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		t.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, b)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s %s: %s", method, url, b)
	}
	return m
}

// waitJob polls job id until ok says so.
func waitJob(t *testing.T, base string, id int64, what string, ok func(job map[string]any) bool) map[string]any {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		job := call(t, "GET", fmt.Sprintf("%s/v1/jobs/%d", base, id), "")
		if ok(job) {
			return job
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d is not %s after 60s: %v", id, what, job)
		}
	}
}

// withoutOTel is this process's environment without any OTEL_ variable.
func withoutOTel() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	return env
}

// startServerEnv starts the server binary with exactly env (plus the database and address).
func startServerEnv(t *testing.T, bin, dbURL, addr string, logs output, env ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(bin), done: make(chan struct{})}
	p.cmd.Env = append(append(withoutOTel(), "DATABASE_URL="+dbURL, "GENDURABLE_ADDR="+addr,
		"GENDURABLE_ALLOW_PRIVATE_WEBHOOKS=true", "GENDURABLE_SHUTDOWN_GRACE=5s"), env...)
	p.cmd.Stdout, p.cmd.Stderr = logs.File, logs.File
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); <-p.done })
	return p
}

// One run, one trace, read back from a real Jaeger v2: a client span inserts a job with
// its traceparent; the server (OTEL_EXPORTER_OTLP_ENDPOINT set) runs it through three
// steps, a retry (a 500), a spawn and an await with real webhook calls to a handler made
// with the Go SDK. Every span of the run is in the client's trace: the API request under
// the client span, each attempt (HTTP client conventions, gendurable.* attributes) and
// each wait under the request's span, the child's attempt under the attempt that spawned
// it; every webhook request's traceparent is its attempt's span; the claim and outcome
// batch spans link to the attempts they carried.
func TestOneTraceFromTheClientThroughEveryStep(t *testing.T) {
	t.Parallel()
	j := startJaeger(t)
	dir := t.TempDir()
	server := build(t, dir, "./cmd/server")
	dbURL := pgtest.NewDatabase(t)
	hooks, hookSrv := newTracedHandlers(t)
	apiAddr := freeAddr(t)
	logs := newOutput(t)
	srv := startServerEnv(t, server, dbURL, apiAddr, logs,
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://"+j.otlp, "OTEL_SERVICE_NAME=gendurable-e2e",
		"OTEL_BSP_SCHEDULE_DELAY=50")
	base := "http://" + apiAddr
	waitReady(t, base+"/readyz", srv, logs)
	if !strings.Contains(logs.String(), `"tracing":true`) {
		t.Fatalf("the server does not say tracing is on:\n%s", logs.String())
	}

	// The client's own tracer, exporting to the same Jaeger.
	ctx := context.Background()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL("http://"+j.otlp+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", "e2e-client"))
	clientTP := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithResource(res))
	defer clientTP.Shutdown(ctx) //nolint:errcheck // flushed below
	cctx, client := clientTP.Tracer("e2e").Start(ctx, "client: order")
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(cctx, carrier)
	traceID := client.SpanContext().TraceID().String()

	for _, name := range []string{"flow", "child"} {
		call(t, "PUT", base+"/v1/handlers/"+name, fmt.Sprintf(`{"url": %q, "secret": %q}`, hookSrv.URL+"/"+name, hooks.secret))
	}
	inserted := request(t, "POST", base+"/v1/jobs", `{"handler": "flow", "input": {"n": 1}}`,
		map[string]string{"traceparent": carrier["traceparent"], "tracestate": "vendor=abc"})
	id := int64(inserted["id"].(float64))
	tp, _ := inserted["traceparent"].(string)
	if !strings.HasPrefix(tp, "00-"+traceID+"-") || inserted["tracestate"] != "vendor=abc" {
		t.Fatalf("the inserted job does not keep the client's trace %s: %v", traceID, inserted)
	}
	waitJob(t, base, id, "awaiting its signal", func(job map[string]any) bool {
		return job["status"] == "awaiting" && job["step"] == float64(4) // steps 0-3 done, the last awaits
	})
	// The signal is sent from the same client span: its request joins the trace (the job
	// keeps its own context).
	request(t, "POST", fmt.Sprintf("%s/v1/jobs/%d/signals", base, id), `{"name": "go"}`,
		map[string]string{"traceparent": carrier["traceparent"]})
	waitJob(t, base, id, "done", func(job map[string]any) bool { return job["status"] == "done" })
	client.End()
	if err := clientTP.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}

	// The webhook calls: flow's six attempts and the child's one, all in the client's trace.
	calls := hooks.seen()
	var flowCalls, childCalls int
	for _, c := range calls {
		if !strings.HasPrefix(c.traceparent, "00-"+traceID+"-") {
			t.Fatalf("a webhook call is not in the client's trace %s: %+v", traceID, c)
		}
		if c.status == 200 && c.contextTraceID != traceID {
			t.Fatalf("the SDK gave the step function a context outside the trace: %+v", c)
		}
		if c.handler == "flow" {
			flowCalls++
		} else {
			childCalls++
		}
	}
	if flowCalls != 6 || childCalls != 1 {
		t.Fatalf("%d calls of flow and %d of child, want 6 and 1: %+v", flowCalls, childCalls, calls)
	}

	spans := j.traceUntil(t, traceID, func(spans []jaegerSpan) bool {
		return len(byOperation(spans, "POST flow")) == 6 && len(byOperation(spans, "POST child")) == 1 &&
			len(byOperation(spans, "POST /v1/jobs")) == 1 && len(byOperation(spans, "client: order")) == 1 &&
			len(byOperation(spans, "POST /v1/jobs/{id}/signals")) == 1
	})
	root := byOperation(spans, "client: order")[0]
	api := byOperation(spans, "POST /v1/jobs")[0]
	if api.parent() != root.SpanID || api.tag("span.kind") != "server" || api.tag("http.response.status_code") != float64(201) {
		t.Fatalf("the insert's span is not a server span under the client's: %+v", api)
	}
	attempts := map[string]jaegerSpan{} // by "step/attempt"
	for _, s := range byOperation(spans, "POST flow") {
		if s.parent() != api.SpanID {
			t.Fatalf("an attempt is not a child of the insert's span %s: %+v", api.SpanID, s)
		}
		if s.tag("span.kind") != "client" || s.tag("http.request.method") != "POST" || s.tag("gendurable.job.id") != float64(id) ||
			s.tag("gendurable.queue") != "default" || s.tag("gendurable.handler") != "flow" ||
			!strings.HasPrefix(fmt.Sprint(s.tag("url.full")), hookSrv.URL) || s.tag("server.address") != "127.0.0.1" {
			t.Fatalf("an attempt span lacks its attributes: %+v", s)
		}
		attempts[fmt.Sprintf("%v/%v", s.tag("gendurable.step"), s.tag("gendurable.attempt"))] = s
	}
	want := map[string][2]any{ // step/attempt → outcome, HTTP status
		"0/1": {"next", float64(200)}, "1/1": {"retry", float64(500)}, "1/2": {"next", float64(200)},
		"2/1": {"spawn", float64(200)}, "3/1": {"await", float64(200)}, "4/1": {"done", float64(200)},
	}
	for key, w := range want {
		s, ok := attempts[key]
		if !ok {
			t.Fatalf("no span of attempt %s: %v", key, attempts)
		}
		if s.tag("gendurable.outcome") != w[0] || s.tag("http.response.status_code") != w[1] {
			t.Fatalf("attempt %s: outcome %v status %v, want %v %v", key, s.tag("gendurable.outcome"),
				s.tag("http.response.status_code"), w[0], w[1])
		}
	}
	if s := attempts["1/1"]; s.tag("error.type") != "500" || s.tag("error") != true {
		t.Fatalf("the failed attempt is not marked an error: %+v", s)
	}
	if s := attempts["4/1"]; s.tag("gendurable.wake") != "signal" {
		t.Fatalf("the step after the signal does not say it was woken by it: %+v", s)
	}
	// The step the signal woke links to the signal's request.
	signalSpan := byOperation(spans, "POST /v1/jobs/{id}/signals")[0]
	if s := attempts["4/1"]; !slices.Contains(s.linked(), signalSpan.SpanID) {
		t.Fatalf("the step the signal woke does not link to the signal's span %s: links %v", signalSpan.SpanID, s.linked())
	}
	for key, s := range attempts {
		if key != "4/1" && slices.Contains(s.linked(), signalSpan.SpanID) {
			t.Fatalf("attempt %s, which no signal woke, links to the signal", key)
		}
	}
	child := byOperation(spans, "POST child")[0]
	if child.parent() != attempts["2/1"].SpanID || child.tag("gendurable.outcome") != "done" {
		t.Fatalf("the child's attempt is not under the attempt that spawned it (%s): %+v", attempts["2/1"].SpanID, child)
	}
	// Each webhook request's traceparent names its attempt's span.
	for _, c := range calls {
		s := child
		if c.handler == "flow" {
			s = attempts[fmt.Sprintf("%d/%d", c.step, c.attempt)]
		}
		if parts := strings.Split(c.traceparent, "-"); len(parts) != 4 || parts[2] != s.SpanID {
			t.Fatalf("call %+v: its traceparent is not its attempt's span %s", c, s.SpanID)
		}
		if c.status == 200 && c.contextSpanID != s.SpanID {
			t.Fatalf("call %+v: the SDK's context does not continue the attempt's span %s", c, s.SpanID)
		}
	}
	// The waits between eligible and claimed, under the job's context.
	waits := byOperation(spans, "gendurable.wait")
	if len(waits) == 0 {
		t.Fatal("no wait span")
	}
	for _, w := range waits {
		if w.parent() != api.SpanID && w.parent() != attempts["2/1"].SpanID {
			t.Fatalf("a wait span is not under the job's context: %+v", w)
		}
	}

	// The claims and outcome batches are traces of their own, linked to every attempt.
	attemptIDs := []string{child.SpanID}
	for _, s := range attempts {
		attemptIDs = append(attemptIDs, s.SpanID)
	}
	for _, op := range []string{"gendurable.claim", "gendurable.outcome"} {
		var linked []string
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			linked = nil
			for _, d := range j.get(t, "/api/traces?service=gendurable-e2e&operation="+op+"&limit=1000&lookback=1h").Data {
				for _, s := range d.Spans {
					if s.OperationName == op {
						if d.TraceID == traceID {
							t.Fatalf("a %s span is in the run's trace: batches are linked, not parents", op)
						}
						linked = append(linked, s.linked()...)
					}
				}
			}
			missing := slices.DeleteFunc(slices.Clone(attemptIDs), func(id string) bool { return slices.Contains(linked, id) })
			if len(missing) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s span links the attempts %v (links seen: %v)", op, missing, linked)
			}
		}
	}
	stopServer(t, srv, logs)
}

// Without OTEL_* the server exports nothing and invents no trace context: a job inserted
// without a traceparent has none and its webhook calls carry none, and one inserted with
// a traceparent passes it to its calls as it came. With OTEL_SDK_DISABLED=true beside an
// endpoint, nothing reaches that endpoint.
func TestNoOTelSettingsExportNothingAndInventNoTrace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	server := build(t, dir, "./cmd/server")
	hooks, hookSrv := newTracedHandlers(t)
	var exports int
	var mu sync.Mutex
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		exports++
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()

	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"no OTEL_ variable", nil},
		{"OTEL_SDK_DISABLED=true", []string{"OTEL_SDK_DISABLED=true", "OTEL_EXPORTER_OTLP_ENDPOINT=" + collector.URL}},
	} {
		dbURL := pgtest.NewDatabase(t)
		apiAddr := freeAddr(t)
		logs := newOutput(t)
		srv := startServerEnv(t, server, dbURL, apiAddr, logs, tc.env...)
		base := "http://" + apiAddr
		waitReady(t, base+"/readyz", srv, logs)
		if !strings.Contains(logs.String(), `"tracing":false`) {
			t.Fatalf("%s: the server does not say tracing is off:\n%s", tc.name, logs.String())
		}
		call(t, "PUT", base+"/v1/handlers/child", fmt.Sprintf(`{"url": %q, "secret": %q}`, hookSrv.URL+"/child", hooks.secret))
		plain := request(t, "POST", base+"/v1/jobs", `{"handler": "child"}`, nil)
		if _, ok := plain["traceparent"]; ok {
			t.Fatalf("%s: a job inserted without a traceparent has one: %v", tc.name, plain)
		}
		const given = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		traced := request(t, "POST", base+"/v1/jobs", `{"handler": "child"}`, map[string]string{"traceparent": given})
		if traced["traceparent"] != given {
			t.Fatalf("%s: the job does not keep its traceparent as it came: %v", tc.name, traced)
		}
		for _, job := range []map[string]any{plain, traced} {
			waitJob(t, base, int64(job["id"].(float64)), "done", func(j map[string]any) bool { return j["status"] == "done" })
		}
		headers := map[string]bool{}
		for _, c := range hooks.seen() {
			headers[c.traceparent] = true
		}
		if !headers[""] || !headers[given] || len(headers) != 2 {
			t.Fatalf("%s: the calls' traceparents are %v, want none for one job and %s for the other", tc.name, headers, given)
		}
		stopServer(t, srv, logs) // flushes whatever a tracer provider would hold
		hooks.mu.Lock()
		hooks.calls = nil
		hooks.mu.Unlock()
	}
	mu.Lock()
	defer mu.Unlock()
	if exports != 0 {
		t.Fatalf("%d export requests reached the collector with OTEL_SDK_DISABLED=true", exports)
	}
}
