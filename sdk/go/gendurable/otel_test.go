package gendurable_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/gendurable/gendurable/sdk/go/gendurable"
	"github.com/gendurable/gendurable/webhook"
)

// spans is the OpenTelemetry SDK this package's tests install as the program would: the
// global tracer provider, recording in memory, and the W3C propagator. Installed once: the
// globals are the process's, and the tests that do not trace run beside it untouched (a
// request without a span in its ctx carries no traceparent).
var spans = sync.OnceValue(func() *tracetest.SpanRecorder {
	rec := tracetest.NewSpanRecorder()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return rec
})

// With the OpenTelemetry SDK installed, a job inserted inside a span is kept in its trace
// (the client writes the span's traceparent), and the webhook handler runs each step in a
// server span "step <handler>" whose parent is the step request's traceparent, active in
// the ctx the step function gets, with the job's attributes.
func TestStepSpansContinueTheInsertersTrace(t *testing.T) {
	t.Parallel()
	rec := spans()
	c, srv := start(t)
	ctx := waitCtx(t)
	var mu sync.Mutex
	seen := map[int]trace.SpanContext{} // step -> the span of the step function's ctx
	headers := map[int]string{}         // step -> the request's traceparent
	register(t, c, "traced", func(ctx context.Context, req *webhook.StepRequest) webhook.Response {
		mu.Lock()
		seen[req.Job.Step], headers[req.Job.Step] = trace.SpanContextFromContext(ctx), req.Traceparent
		mu.Unlock()
		if req.Job.Step == 0 {
			return webhook.Response{Next: &webhook.Next{}}
		}
		return webhook.Response{Done: &webhook.Done{}}
	})
	tctx, client := otel.Tracer("test").Start(ctx, "client")
	job, err := c.Insert(tctx, gendurable.JobInsert{Handler: "traced"})
	client.End()
	if err != nil {
		t.Fatal(err)
	}
	traceID := client.SpanContext().TraceID()
	if job.Traceparent == nil || !strings.HasPrefix(*job.Traceparent, "00-"+traceID.String()+"-") {
		t.Fatalf("the job is not kept in the inserting span's trace %s: %v", traceID, job.Traceparent)
	}
	if done, err := c.Wait(ctx, job.Id); err != nil || done.Status != "done" {
		t.Fatalf("%v %v\n%s", done, err, srv.Logs())
	}

	var steps []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "step traced" && s.SpanContext().TraceID() == traceID {
			steps = append(steps, s)
		}
	}
	if len(steps) != 2 {
		t.Fatalf("%d step spans in the trace, want 2", len(steps))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range steps {
		attrs := map[string]string{}
		for _, a := range s.Attributes() {
			attrs[string(a.Key)] = a.Value.String()
		}
		step := 0
		if attrs["gendurable.step"] == "1" {
			step = 1
		}
		parent := strings.Split(headers[step], "-")
		if s.SpanKind() != trace.SpanKindServer || len(parent) != 4 || s.Parent().SpanID().String() != parent[2] ||
			!s.Parent().IsRemote() || seen[step].SpanID() != s.SpanContext().SpanID() {
			t.Fatalf("step %d's span: kind %v, parent %s (request's traceparent %q), the step function's span %s, want %s",
				step, s.SpanKind(), s.Parent().SpanID(), headers[step], seen[step].SpanID(), s.SpanContext().SpanID())
		}
		if attrs["gendurable.handler"] != "traced" || attrs["gendurable.job.id"] != strconv.FormatInt(job.Id, 10) {
			t.Fatalf("step %d's span attributes: %v", step, attrs)
		}
	}
}
