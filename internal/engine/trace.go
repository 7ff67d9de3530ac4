package engine

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/gendurable/gendurable/internal/pg"
)

// W3C trace context (https://www.w3.org/TR/trace-context/) as the engine keeps it: a
// job's trace context is its traceparent, then a space and its tracestate when it has
// one (jobs.trace_context, migration 0018). The engine only checks and carries it; the
// spans are the dispatcher's and the API's (docs/observability.md).

// maxTracestate is the most bytes of tracestate kept (W3C allows 32 members of up to
// 256 bytes; 512 is what propagators are asked to keep at least).
const maxTracestate = 512

// ValidTraceparent reports whether s is a version-00 W3C traceparent:
// 00-<32 lowercase hex trace id>-<16 lowercase hex parent id>-<2 hex flags>, neither id
// all zeros.
func ValidTraceparent(s string) bool {
	if len(s) != 55 || s[0] != '0' || s[1] != '0' || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return false
	}
	return lowerHex(s[3:35]) && lowerHex(s[36:52]) && lowerHex(s[53:55]) &&
		s[3:35] != "00000000000000000000000000000000" && s[36:52] != "0000000000000000"
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// TraceContextOf is the trace context of a traceparent and tracestate as a job keeps it,
// or nil when traceparent is not valid (W3C: an invalid traceparent is ignored, and its
// tracestate with it). A tracestate over 512 bytes or holding control characters is dropped.
func TraceContextOf(traceparent, tracestate string) *string {
	traceparent = strings.TrimSpace(traceparent)
	if !ValidTraceparent(traceparent) {
		return nil
	}
	tracestate = strings.TrimSpace(tracestate)
	if tracestate == "" || len(tracestate) > maxTracestate || strings.ContainsFunc(tracestate, isControl) {
		return &traceparent
	}
	tc := traceparent + " " + tracestate
	return &tc
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// SplitTraceContext splits a job's trace context into its traceparent and tracestate
// ("" when absent); both share tc's memory.
func SplitTraceContext(tc string) (traceparent, tracestate string) {
	traceparent, tracestate, _ = strings.Cut(tc, " ")
	return traceparent, tracestate
}

// TraceID is the trace id of a job's trace context ("" for none).
func TraceID(tc *string) string {
	if tc == nil || len(*tc) < 35 {
		return ""
	}
	return (*tc)[3:35]
}

// ContinueTrace gives the children of a spawn outcome that carry no trace context of
// their own tc, the context of the step attempt that spawned them (without it, the
// outcome statement gives them their parent job's).
func (o *Outcome) ContinueTrace(tc string) {
	if o.Kind != pg.KindSpawn {
		return
	}
	for i := range o.Children {
		if o.Children[i].TraceContext == nil {
			o.Children[i].TraceContext = &tc
		}
	}
}

// SpanContextOf is the (remote) span context of a trace context as a job keeps it; not
// valid when tc is not.
func SpanContextOf(tc string) trace.SpanContext {
	traceparent, tracestate := SplitTraceContext(tc)
	carrier := propagation.MapCarrier{"traceparent": traceparent}
	if tracestate != "" {
		carrier["tracestate"] = tracestate
	}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
}

// TraceContextOfSpan is the trace context a job keeps for a span context: its
// traceparent, and its tracestate after a space ("" when sc is not valid).
func TraceContextOfSpan(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), carrier)
	tc := carrier["traceparent"]
	if ts := carrier["tracestate"]; ts != "" {
		tc += " " + ts
	}
	return tc
}
