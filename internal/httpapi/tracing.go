package httpapi

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/gendurable/gendurable/internal/engine"
)

// tracing makes a server span of every request (the HTTP server semantic conventions),
// child of the caller's W3C trace context: named by method and route once chi has routed
// it. Only installed when Config.TracerProvider is set.
func tracing(tp trace.TracerProvider) func(http.Handler) http.Handler {
	tracer := tp.Tracer("github.com/gendurable/gendurable/internal/httpapi")
	prop := propagation.TraceContext{}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
			ctx, span := tracer.Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(attribute.String("http.request.method", r.Method),
					attribute.String("url.path", r.URL.Path)))
			defer span.End()
			rec := &statusRecorder{ResponseWriter: w}
			next.ServeHTTP(rec, r.WithContext(ctx))
			if rc := chi.RouteContext(r.Context()); rc != nil {
				if route := rc.RoutePattern(); route != "" {
					span.SetName(r.Method + " " + route)
					span.SetAttributes(attribute.String("http.route", route))
				}
			}
			status := rec.status
			if status == 0 {
				status = http.StatusOK
			}
			span.SetAttributes(attribute.Int("http.response.status_code", status))
			if status >= 500 {
				span.SetStatus(codes.Error, http.StatusText(status))
			}
		})
	}
}

// jobTraceContext is the trace context jobs inserted by this request keep: the server's
// span of the request when tracing is on (its context is valid, sampled or not: the
// decision travels with the job), else the request's own traceparent and tracestate
// (nil when it has none, or none that is valid: nothing is invented).
func jobTraceContext(ctx context.Context, traceparent, tracestate *string) *string {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && !sc.IsRemote() {
		tc := traceparentOf(sc)
		if ts := sc.TraceState().String(); ts != "" {
			tc += " " + ts
		}
		return &tc
	}
	if traceparent == nil {
		return nil
	}
	state := ""
	if tracestate != nil {
		state = *tracestate
	}
	return engine.TraceContextOf(*traceparent, state)
}

// traceparentOf is the W3C traceparent of sc.
func traceparentOf(sc trace.SpanContext) string {
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), carrier)
	return carrier["traceparent"]
}
