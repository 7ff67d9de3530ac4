package dispatch

import (
	"strconv"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
)

func tracedStep(trace *string) *engine.Step {
	url, secret, handler := "http://127.0.0.1:1/steps", "whsec_Z2VuZHVyYWJsZS1xdWlja3N0YXJ0LWRlbW8tc2VjcmV0", "h"
	return &engine.Step{ClaimedJob: pg.ClaimedJob{ID: 42, Queue: "default", Handler: handler, Step: 1, Attempt: 1,
		MaxAttempts: 5, Input: []byte(`{"n":1}`), CreatedAt: time.Now(), LeaseToken: "0b5e6f3c-7e8a-4c2d-9f3e-1a2b3c4d5e6f",
		ClaimedAt: time.Now(), HandlerURL: &url, Secret: &secret, Trace: trace}}
}

const testTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// With tracing off, a step of a job with a trace context costs its request no allocation
// more than a step of a job without one: the job's traceparent and tracestate go out as
// they are, sliced from the claim's column. (An invariant of "off costs nothing": it fails
// if the off path starts to parse, format or make spans.)
func TestTracingOffAddsNoAllocationToAStep(t *testing.T) {
	d := New(nil, Config{}, nil, nil)
	traced := "1700000000000000 " + testTraceparent + " vendor=abc"
	plain, withTrace := tracedStep(nil), tracedStep(&traced)
	req, refused := d.prepareCall(withTrace)
	if refused != nil {
		t.Fatal(refused)
	}
	if got := req.headers[3:req.nheaders]; len(got) != 2 || got[0].Value != testTraceparent || got[1].Value != "vendor=abc" {
		t.Fatalf("the traced step's request headers: %+v", req.headers[:req.nheaders])
	}
	if req, _ := d.prepareCall(plain); req.nheaders != 3 {
		t.Fatalf("a step without a trace context sends trace headers: %+v", req.headers[:req.nheaders])
	}
	if raceEnabled {
		t.Skip("allocation counts vary under the race detector; the headers were checked above")
	}
	base := testing.AllocsPerRun(200, func() { _, _ = d.prepareCall(plain) })
	with := testing.AllocsPerRun(200, func() { _, _ = d.prepareCall(withTrace) })
	if with != base {
		t.Fatalf("tracing off: %v allocations for a traced step's request, %v for a plain one's", with, base)
	}
}

// With tracing on, the attempt's span is the parent the webhook request names, in the
// job's trace; the claim's span links to it; its wait runs from eligible to claimed.
func TestTracingOnMakesTheAttemptTheRequestsParent(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	d := New(nil, Config{TracerProvider: tp}, nil, nil)
	claimed := time.Now().Add(-time.Second)
	eligible := claimed.Add(-250 * time.Millisecond)
	trace := func(us int64) *string { s := strconv.FormatInt(us, 10) + " " + testTraceparent; return &s }(eligible.UnixMicro())
	steps := []engine.Step{*tracedStep(trace)}
	steps[0].ClaimedAt = claimed
	d.traceClaim("default", claimed.Add(-time.Millisecond), steps)
	req, refused := d.prepareCall(&steps[0])
	if refused != nil {
		t.Fatal(refused)
	}
	sc := steps[0].Span.SpanContext()
	if want := formatTraceparent(sc); req.headers[3].Value != want || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("traceparent %q, want the attempt's %q in the job's trace", req.headers[3].Value, want)
	}
	status := 200
	endAttemptSpan(&steps[0], &engine.Outcome{Kind: "done", Label: "done", HTTPStatus: &status}, false)
	ended := rec.Ended()
	names := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range ended {
		names[s.Name()] = s
	}
	wait, attempt, claim := names[spanWait], names["POST h"], names[spanClaim]
	if wait == nil || attempt == nil || claim == nil {
		t.Fatalf("spans ended: %v", names)
	}
	if wait.Parent().SpanID().String() != "00f067aa0ba902b7" || !wait.StartTime().Equal(time.UnixMicro(eligible.UnixMicro())) ||
		!wait.EndTime().Equal(claimed) {
		t.Fatalf("the wait span: parent %s, %s to %s", wait.Parent().SpanID(), wait.StartTime(), wait.EndTime())
	}
	if attempt.Parent().SpanID().String() != "00f067aa0ba902b7" || claim.Parent().IsValid() ||
		len(claim.Links()) != 1 || claim.Links()[0].SpanContext.SpanID() != sc.SpanID() {
		t.Fatalf("the claim's span is not a root linked to the attempt: parent %v, links %v", claim.Parent(), claim.Links())
	}
}

// An attempt shown signals links to the trace context each was sent with (and to none
// for a signal sent without one); with tracing off nothing reads them.
func TestAnAttemptLinksToTheSignalsItIsShown(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	d := New(nil, Config{TracerProvider: tp}, nil, nil)
	const sender = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	withState, bad := sender+" vendor=abc", "not a traceparent"
	st := tracedStep(nil)
	wake := "signal"
	st.Wake = &wake
	st.Signals = []pg.Signal{{ID: 7, JobID: 42, Seq: 1, Name: "go", TraceContext: &withState},
		{ID: 8, JobID: 42, Seq: 2, Name: "untraced"}, {ID: 9, JobID: 42, Seq: 3, Name: "bad", TraceContext: &bad}}
	steps := []engine.Step{*st}
	d.traceClaim("default", time.Now(), steps)
	endAttemptSpan(&steps[0], nil, false)
	var attempt sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "POST h" {
			attempt = s
		}
	}
	if attempt == nil {
		t.Fatal("no attempt span")
	}
	links := attempt.Links()
	if len(links) != 1 || links[0].SpanContext.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" ||
		links[0].SpanContext.SpanID().String() != "b7ad6b7169203331" || links[0].SpanContext.TraceState().String() != "vendor=abc" {
		t.Fatalf("the attempt's links: %+v, want one to the signal's sender", links)
	}
	attrs := map[string]string{}
	for _, a := range links[0].Attributes {
		attrs[string(a.Key)] = a.Value.String()
	}
	if attrs["gendurable.signal"] != "go" || attrs["gendurable.signal.id"] != "7" {
		t.Fatalf("the link's attributes: %v", attrs)
	}
	if attempt.Parent().IsValid() {
		t.Fatalf("a job without a trace context got a parent from its signal: %v", attempt.Parent())
	}
}

// BenchmarkStepTracing is the tracing cost of one step's request: off (a job with and
// without a trace context) and on (the claim's, wait's and attempt's spans, with a
// recorder that keeps nothing).
func BenchmarkStepTracing(b *testing.B) {
	traced := "1700000000000000 " + testTraceparent
	off := New(nil, Config{}, nil, nil)
	on := New(nil, Config{TracerProvider: sdktrace.NewTracerProvider()}, nil, nil)
	status := 200
	for _, bc := range []struct {
		name  string
		d     *Dispatcher
		trace *string
	}{{"off/no-trace", off, nil}, {"off/traced-job", off, &traced}, {"on/traced-job", on, &traced}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			steps := []engine.Step{*tracedStep(bc.trace)}
			for range b.N {
				steps[0].Span = nil
				if bc.d.tracer != nil {
					bc.d.traceClaim("default", steps[0].ClaimedAt, steps)
				}
				_, _ = bc.d.prepareCall(&steps[0])
				if steps[0].Span != nil {
					endAttemptSpan(&steps[0], &engine.Outcome{Kind: "done", Label: "done", HTTPStatus: &status}, false)
				}
			}
		})
	}
}

// The webhook URL's credentials never reach a span.
func TestURLAttributesRedactCredentials(t *testing.T) {
	for raw, want := range map[string][3]string{
		"http://127.0.0.1:9090/steps?token=x": {"http://127.0.0.1:9090/steps", "127.0.0.1", "9090"},
		"https://user:pw@hooks.example/a/b":   {"https://REDACTED:REDACTED@hooks.example/a/b", "hooks.example", "443"},
		"http://[::1]:8080/":                  {"http://[::1]:8080/", "::1", "8080"},
		"http://hooks.example":                {"http://hooks.example", "hooks.example", "80"},
	} {
		got := urlAttributes(raw)
		if len(got) != 3 || got[0].Value.AsString() != want[0] || got[1].Value.AsString() != want[1] ||
			strconv.FormatInt(got[2].Value.AsInt64(), 10) != want[2] {
			t.Errorf("%s: %v, want %v", raw, got, want)
		}
	}
}
