package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// The loader picks the OTLP transport from OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else
// OTEL_EXPORTER_OTLP_PROTOCOL, and refuses what the Go exporters do not speak.
func TestTracingConfigChoosesTheOTLPProtocol(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env     map[string]string
		want    string // "" for a refusal
		enabled bool
	}{
		{map[string]string{}, "http/protobuf", false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}, "http/protobuf", true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "grpc", true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, "grpc", true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x:4318/v1/traces", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, "http/protobuf", true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "", true},
	} {
		got, err := loadTracingConfig(func(k string) string { return c.env[k] })
		switch {
		case c.want == "" && (err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_PROTOCOL")):
			t.Errorf("%v: %v, want a refusal naming the variable", c.env, err)
		case c.want != "" && (err != nil || got.Protocol != c.want || got.Enabled != c.enabled):
			t.Errorf("%v: %+v %v, want protocol %s, enabled %v", c.env, got, err, c.want, c.enabled)
		}
	}
}

// A schedule's ticks, read back from Jaeger, with the server exporting over OTLP/gRPC
// (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=grpc winning over OTEL_EXPORTER_OTLP_PROTOCOL=
// http/protobuf, the endpoint Jaeger's gRPC port: nothing would arrive over HTTP). The
// client's span PUTs the schedule: the PUT's span is in the client's trace and the
// schedule keeps it. Each tick is a trace of its own: its root span
// "gendurable.schedule.tick" links to the PUT's span, and the tick job's attempt is its
// child. "Run now" from the client's span makes a job in the client's trace, under the
// request's span.
func TestScheduleTicksAreTracesLinkedToTheirScheduleOverGRPC(t *testing.T) {
	t.Parallel()
	j := startJaeger(t)
	dir := t.TempDir()
	server := build(t, dir, "./cmd/server")
	dbURL := pgtest.NewDatabase(t)
	hooks, hookSrv := newTracedHandlers(t)
	apiAddr := freeAddr(t)
	logs := newOutput(t)
	srv := startServerEnv(t, server, dbURL, apiAddr, logs,
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://"+j.otlpGRPC, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=grpc", "OTEL_SERVICE_NAME=gendurable-ticks", "OTEL_BSP_SCHEDULE_DELAY=50")
	base := "http://" + apiAddr
	waitReady(t, base+"/readyz", srv, logs)

	ctx := context.Background()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL("http://"+j.otlp+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	clientTP := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "e2e-scheduler"))))
	defer clientTP.Shutdown(ctx) //nolint:errcheck // flushed below
	cctx, client := clientTP.Tracer("e2e").Start(ctx, "client: set up the report")
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(cctx, carrier)
	clientTrace := client.SpanContext().TraceID().String()
	withTrace := map[string]string{"traceparent": carrier["traceparent"]}

	call(t, "PUT", base+"/v1/handlers/child", fmt.Sprintf(`{"url": %q, "secret": %q}`, hookSrv.URL+"/child", hooks.secret))
	sched := request(t, "PUT", base+"/v1/schedules/report", `{"cron": "@every 1s", "handler": "child"}`, withTrace)
	kept, _ := sched["traceparent"].(string)
	parts := strings.Split(kept, "-")
	if len(parts) != 4 || parts[1] != clientTrace {
		t.Fatalf("the schedule does not keep the client's trace %s: %v", clientTrace, sched)
	}
	putSpanID := parts[2] // the server's span of the PUT (tracing is on)

	// The first tick's job, done.
	var tick map[string]any
	for deadline := time.Now().Add(60 * time.Second); tick == nil; time.Sleep(50 * time.Millisecond) {
		for _, job := range call(t, "GET", base+"/v1/jobs?schedule=report&status=done", "")["jobs"].([]any) {
			tick = job.(map[string]any)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no tick of the schedule is done after 60s:\n%s", logs.String())
		}
	}
	tickParent, _ := tick["traceparent"].(string)
	tickParts := strings.Split(tickParent, "-")
	if len(tickParts) != 4 || tickParts[1] == clientTrace {
		t.Fatalf("the tick's job is not in a trace of its own: %v", tick)
	}
	tickTrace := tickParts[1]

	// Run now, from the client's span.
	now := request(t, "POST", base+"/v1/schedules/report/run", "", withTrace)
	if tp, _ := now["traceparent"].(string); !strings.HasPrefix(tp, "00-"+clientTrace+"-") {
		t.Fatalf("the job run now is not in the client's trace %s: %v", clientTrace, now)
	}
	waitJob(t, base, int64(now["id"].(float64)), "done", func(job map[string]any) bool { return job["status"] == "done" })
	del, _ := http.NewRequest("DELETE", base+"/v1/schedules/report", nil)
	if resp, err := http.DefaultClient.Do(del); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE the schedule: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	client.End()
	if err := clientTP.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}

	// The tick's trace: a root tick span linked to the PUT's span, the attempt under it.
	spans := j.traceUntil(t, tickTrace, func(spans []jaegerSpan) bool {
		return len(byOperation(spans, "gendurable.schedule.tick")) == 1 && len(byOperation(spans, "POST child")) == 1
	})
	tickSpan := byOperation(spans, "gendurable.schedule.tick")[0]
	if tickSpan.parent() != "" || tickSpan.tag("span.kind") != "producer" || tickSpan.tag("gendurable.schedule") != "report" ||
		tickSpan.tag("gendurable.schedule.outcome") != "fired" || tickSpan.tag("gendurable.job.id") != tick["id"] ||
		tickSpan.SpanID != tickParts[2] {
		t.Fatalf("the tick's span is not the root of its job's trace with its attributes: %+v (job %v)", tickSpan, tick)
	}
	var linked bool
	for _, r := range tickSpan.References {
		linked = linked || (r.RefType != "CHILD_OF" && r.TraceID == clientTrace && r.SpanID == putSpanID)
	}
	if !linked {
		t.Fatalf("the tick's span does not link to the schedule's PUT (%s/%s): %+v", clientTrace, putSpanID, tickSpan.References)
	}
	if attempt := byOperation(spans, "POST child")[0]; attempt.parent() != tickSpan.SpanID {
		t.Fatalf("the tick job's attempt is not under the tick's span: %+v", attempt)
	}
	for _, c := range hooks.seen() {
		if strings.Contains(c.traceparent, tickTrace) && c.contextTraceID != tickTrace {
			t.Fatalf("the SDK gave the tick's step a context outside its trace: %+v", c)
		}
	}

	// The client's trace: the PUT, the run now and its job's attempt under it.
	spans = j.traceUntil(t, clientTrace, func(spans []jaegerSpan) bool {
		return len(byOperation(spans, "PUT /v1/schedules/{name}")) == 1 &&
			len(byOperation(spans, "POST /v1/schedules/{name}/run")) == 1 && len(byOperation(spans, "POST child")) == 1
	})
	if put := byOperation(spans, "PUT /v1/schedules/{name}")[0]; put.SpanID != putSpanID {
		t.Fatalf("the schedule keeps span %s, the PUT's is %s", putSpanID, put.SpanID)
	}
	run := byOperation(spans, "POST /v1/schedules/{name}/run")[0]
	if attempt := byOperation(spans, "POST child")[0]; attempt.parent() != run.SpanID || attempt.tag("gendurable.job.id") != now["id"] {
		t.Fatalf("the job run now's attempt is not under the run request's span %s: %+v", run.SpanID, attempt)
	}
	stopServer(t, srv, logs)
}
