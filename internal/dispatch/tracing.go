package dispatch

import (
	"context"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/webhookclient"
)

// The dispatcher's part of tracing (docs/observability.md). A job keeps the W3C trace
// context it was inserted with; the claim answers it beside the job's eligible time
// (pg.ClaimedJob.Trace, NULL for a job without one).
//
// With tracing off (Config.TracerProvider nil) the dispatcher makes no span: a step of a
// job with a trace context passes the job's traceparent and tracestate to its webhook as
// they are (the handler's spans then hang under the caller's), and a step of a job
// without one sends neither header. Nothing on the step path allocates for it.
//
// With tracing on, each claim is a span "gendurable.claim"; each step attempt a client
// span "POST <handler>" (the HTTP client semantic conventions, plus gendurable.*
// attributes), child of the job's context (a root when the job has none), started when
// the step was claimed and ended when its answer is known; before it, a span
// "gendurable.wait" from the time the step was eligible to its claim. The attempt's
// context is the traceparent of its webhook request and the trace context of the
// children a spawn makes. A claim and an outcome batch serve many steps of many traces,
// so their spans are linked to the attempts they carried, not their parents. An attempt
// shown signals is linked to the trace context each was sent with (signalLinks).

// Span and attribute names.
const (
	spanClaim   = "gendurable.claim"
	spanOutcome = "gendurable.outcome"
	spanWait    = "gendurable.wait"

	attrQueue     = attribute.Key("gendurable.queue")
	attrHandler   = attribute.Key("gendurable.handler")
	attrJobID     = attribute.Key("gendurable.job.id")
	attrStep      = attribute.Key("gendurable.step")
	attrAttempt   = attribute.Key("gendurable.attempt")
	attrOutcome   = attribute.Key("gendurable.outcome")
	attrLabel     = attribute.Key("gendurable.outcome.label")
	attrBatchSize = attribute.Key("gendurable.batch.size")
	attrWake      = attribute.Key("gendurable.wake")
	attrSignal    = attribute.Key("gendurable.signal")
	attrSignalID  = attribute.Key("gendurable.signal.id")
	// HTTP client semantic conventions.
	attrMethod     = attribute.Key("http.request.method")
	attrURL        = attribute.Key("url.full")
	attrServer     = attribute.Key("server.address")
	attrPort       = attribute.Key("server.port")
	attrStatusCode = attribute.Key("http.response.status_code")
	attrErrorType  = attribute.Key("error.type")
	attrDBSystem   = attribute.Key("db.system.name")
	attrDBOp       = attribute.Key("db.operation.name")
)

var traceContextPropagator = propagation.TraceContext{}

// claimTrace splits the claim's trace column: the job's eligible time and its
// traceparent and tracestate (all zero when trace is nil or unreadable).
func claimTrace(trace *string) (eligible time.Time, traceparent, tracestate string) {
	if trace == nil {
		return time.Time{}, "", ""
	}
	micros, tc, ok := strings.Cut(*trace, " ")
	if !ok {
		return time.Time{}, "", ""
	}
	if us, err := strconv.ParseInt(micros, 10, 64); err == nil {
		eligible = time.UnixMicro(us)
	}
	traceparent, tracestate = engine.SplitTraceContext(tc)
	return eligible, traceparent, tracestate
}

// traceHeaders writes the step's traceparent (and tracestate) into headers from index n
// on and answers the count: the attempt's span context when tracing is on, else the
// job's own. The headers are canonical names, as webhookclient writes them.
//
//go:noinline
func traceHeaders(st *engine.Step, headers *[5]webhookclient.Header, n int) int {
	var traceparent, tracestate string
	if st.Span != nil {
		sc := st.Span.SpanContext()
		if !sc.IsValid() {
			return n
		}
		traceparent, tracestate = formatTraceparent(sc), sc.TraceState().String()
	} else if st.Trace != nil {
		// The job's own, sliced from the claim's column (no parse: nothing allocates).
		if _, tc, ok := strings.Cut(*st.Trace, " "); ok {
			traceparent, tracestate = engine.SplitTraceContext(tc)
		}
	}
	if traceparent == "" {
		return n
	}
	headers[n] = webhookclient.Header{Name: "Traceparent", Value: traceparent}
	n++
	if tracestate != "" {
		headers[n] = webhookclient.Header{Name: "Tracestate", Value: tracestate}
		n++
	}
	return n
}

// formatTraceparent is the W3C traceparent of sc.
func formatTraceparent(sc trace.SpanContext) string {
	tid, sid := sc.TraceID(), sc.SpanID()
	b := make([]byte, 0, 55)
	b = append(b, "00-"...)
	b = appendHex(b, tid[:])
	b = append(b, '-')
	b = appendHex(b, sid[:])
	b = append(b, '-')
	b = appendHex(b, []byte{byte(sc.TraceFlags())})
	return string(b)
}

func appendHex(b, src []byte) []byte {
	const digits = "0123456789abcdef"
	for _, c := range src {
		b = append(b, digits[c>>4], digits[c&0xf])
	}
	return b
}

// traceContextOf is the trace context a job keeps (engine.TraceContextOf's form) for
// span's context: its traceparent, and its tracestate after a space.
func traceContextOf(span trace.Span) string {
	sc := span.SpanContext()
	tc := formatTraceparent(sc)
	if ts := sc.TraceState().String(); ts != "" {
		tc += " " + ts
	}
	return tc
}

// parentContext is the context a step's spans are children of: the job's trace context,
// or none (a new trace).
func parentContext(traceparent, tracestate string) context.Context {
	ctx := context.Background()
	if traceparent == "" {
		return ctx
	}
	carrier := propagation.MapCarrier{"traceparent": traceparent}
	if tracestate != "" {
		carrier["tracestate"] = tracestate
	}
	return traceContextPropagator.Extract(ctx, carrier)
}

// traceClaim records a claim of queue that began at started and claimed steps: a span
// for the claim, and for each step its wait and the start of its attempt's span
// (Step.Span, ended by endAttemptSpan), linked from the claim's.
func (d *Dispatcher) traceClaim(queue string, started time.Time, steps []engine.Step) {
	_, claim := d.tracer.Start(context.Background(), spanClaim, trace.WithTimestamp(started),
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrQueue.String(queue), attrBatchSize.Int(len(steps)),
			attrDBSystem.String("postgresql"), attrDBOp.String("JobClaim")))
	for i := range steps {
		st := &steps[i]
		eligible, traceparent, tracestate := claimTrace(st.Trace)
		parent := parentContext(traceparent, tracestate)
		job := []attribute.KeyValue{attrQueue.String(st.Queue), attrHandler.String(st.Handler),
			attrJobID.Int64(st.ID), attrStep.Int(st.Step), attrAttempt.Int(st.Attempt)}
		if !eligible.IsZero() && eligible.Before(st.ClaimedAt) {
			_, wait := d.tracer.Start(parent, spanWait, trace.WithTimestamp(eligible), trace.WithAttributes(job...))
			wait.End(trace.WithTimestamp(st.ClaimedAt))
		}
		attrs := append(job, attrMethod.String("POST"))
		if st.Wake != nil {
			attrs = append(attrs, attrWake.String(*st.Wake))
		}
		if st.HandlerURL != nil {
			attrs = append(attrs, urlAttributes(*st.HandlerURL)...)
		}
		_, st.Span = d.tracer.Start(parent, "POST "+st.Handler, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithTimestamp(st.ClaimedAt), trace.WithAttributes(attrs...), trace.WithLinks(signalLinks(st)...))
		claim.AddLink(trace.Link{SpanContext: st.Span.SpanContext()})
	}
	claim.End()
}

// signalLinks are the links of an attempt's span to the senders of the signals it is
// shown (the claim loaded them with their trace contexts: no statement is added), the
// one that woke it among them; nil when none came with a trace context.
func signalLinks(st *engine.Step) []trace.Link {
	var links []trace.Link
	for _, sig := range st.Signals {
		if sig.TraceContext == nil {
			continue
		}
		if sc := engine.SpanContextOf(*sig.TraceContext); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{
				attrSignal.String(sig.Name), attrSignalID.Int64(sig.ID)}})
		}
	}
	return links
}

// urlAttributes are the semantic conventions' url.full, server.address and server.port
// of a webhook URL (its query left out and its user info redacted: they may carry a
// credential).
func urlAttributes(raw string) []attribute.KeyValue {
	full := raw
	if i := strings.IndexAny(full, "?#"); i >= 0 {
		full = full[:i]
	}
	out := []attribute.KeyValue{attrURL.String(full)}
	rest, ok := strings.CutPrefix(full, "http://")
	port := 80
	if !ok {
		if rest, ok = strings.CutPrefix(full, "https://"); !ok {
			return out
		}
		port = 443
	}
	host, path, _ := strings.Cut(rest, "/")
	if _, h, ok := strings.Cut(host, "@"); ok { // credentials are never recorded
		host = h
		out[0] = attrURL.String(full[:len(full)-len(rest)] + "REDACTED:REDACTED@" + h + "/" + path)
	}
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.HasSuffix(host, "]") {
		if p, err := strconv.Atoi(host[i+1:]); err == nil {
			port = p
		}
		host = host[:i]
	}
	return append(out, attrServer.String(strings.Trim(host, "[]")), attrPort.Int(port))
}

// endAttemptSpan ends the attempt's span with its outcome (nil: a 202, or a call
// abandoned), and gives the children of a spawn the attempt's context.
//
//go:noinline
func endAttemptSpan(st *engine.Step, outcome *engine.Outcome, aborted bool) {
	span := st.Span
	switch {
	case outcome == nil && aborted:
		span.SetAttributes(attrOutcome.String("abandoned"))
		span.SetStatus(codes.Error, "the call was abandoned: lease lost or shutdown")
	case outcome == nil:
		span.SetAttributes(attrOutcome.String("accepted"), attrStatusCode.Int(202))
	default:
		span.SetAttributes(attrOutcome.String(outcome.Kind), attrLabel.String(outcome.Label))
		if outcome.HTTPStatus != nil {
			span.SetAttributes(attrStatusCode.Int(*outcome.HTTPStatus))
		}
		switch outcome.Kind {
		case "retry", "fail":
			errType := outcome.Label
			if outcome.HTTPStatus != nil && *outcome.HTTPStatus >= 400 {
				errType = strconv.Itoa(*outcome.HTTPStatus)
			}
			span.SetAttributes(attrErrorType.String(errType))
			span.SetStatus(codes.Error, outcome.Label)
		case "spawn":
			outcome.ContinueTrace(traceContextOf(span))
		}
	}
	span.End()
}

// traceOutcomes starts the span of an outcome batch, linked to the attempts it writes
// (nil when tracing is off).
func (c *completer) traceOutcomes(batch []pendingOutcome) trace.Span {
	if c.tracer == nil {
		return nil
	}
	links := make([]trace.Link, 0, len(batch))
	for _, p := range batch {
		if p.step.Span != nil {
			links = append(links, trace.Link{SpanContext: p.step.Span.SpanContext()})
		}
	}
	_, span := c.tracer.Start(context.Background(), spanOutcome, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithLinks(links...), trace.WithAttributes(attrBatchSize.Int(len(batch)),
			attrDBSystem.String("postgresql"), attrDBOp.String("JobApplyOutcomes")))
	return span
}

// stepTraceID is the trace id of the step's attempt, or of its job ("" for none): the
// trace_id field of the dispatcher's log lines about a step.
func stepTraceID(st *engine.Step) string {
	if st.Span != nil {
		if sc := st.Span.SpanContext(); sc.IsValid() {
			return sc.TraceID().String()
		}
	}
	_, traceparent, _ := claimTrace(st.Trace)
	return engine.TraceID(&traceparent)
}

// endParkedSpan ends the span of a claimed step given back unrun because its handler's
// circuit breaker is open (no attempt used).
func endParkedSpan(span trace.Span) {
	span.SetAttributes(attrOutcome.String("parked"))
	span.End()
}
