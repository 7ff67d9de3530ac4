package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// MaxRequestBytes caps the step request Handler reads (the service's default cap).
const MaxRequestBytes = 1 << 20

// StepFunc runs one step and says what happens next.
type StepFunc func(ctx context.Context, req *StepRequest) Response

// Handler serves a step webhook: it verifies the signature with secret, decodes the
// step, runs fn and writes its answer. The secret's key is decoded once and its HMAC
// states reused (a Signer).
//
// Every error is answered as an RFC 9457 problem (application/problem+json with type,
// title, status and detail), as the TypeScript and Python SDKs answer it: 405 for a
// request that is not a POST, 413 for a body over MaxRequestBytes, 401 for a missing or
// bad signature or a stale timestamp, 400 for a body that is not a step request (JSON
// with job and lease), and 500 when fn's answer sets other than exactly one field or
// does not encode (a RawMessage that is not JSON). The service retries every non-2xx.
// A panic in fn is net/http's to handle: the connection is dropped, which the service
// retries too.
//
// Handler panics when secret is malformed (see NewHandler) or fn is nil, as a
// misconfiguration is best found when the program starts; NewHandler returns the error
// instead, for a secret read from configuration.
func Handler(secret string, fn StepFunc) http.Handler {
	h, err := NewHandler(secret, fn)
	if err != nil {
		panic(err)
	}
	return h
}

// NewHandler is Handler, answering an error rather than panicking when secret is not
// a signing secret (the whsec_ prefix optional, then the key in padded standard base64)
// or fn is nil. The error says what is wrong with the secret without quoting it.
func NewHandler(secret string, fn StepFunc) (http.Handler, error) {
	signer, err := NewSigner(secret)
	if err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, errors.New("webhook: the step function is nil")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeProblem(w, problemNotPost, "a step request is a POST, not "+r.Method)
			return
		}
		body, err := readRequest(r)
		switch {
		case err == errTooLarge:
			writeProblem(w, problemTooLarge, "a step request is at most 1 MiB")
			return
		case err != nil:
			writeProblem(w, problemBadStep, "the body could not be read: "+err.Error())
			return
		}
		if err := signer.Verify(r.Header, body, 0); err != nil {
			writeProblem(w, problemSignature, strings.TrimPrefix(err.Error(), "webhook: "))
			return
		}
		req, why := readStep(body)
		if why != "" {
			writeProblem(w, problemBadStep, why)
			return
		}
		ctx := r.Context()
		if tp := r.Header.Get("Traceparent"); tp != "" {
			var span trace.Span
			ctx, span = startStepSpan(ctx, r.Header, &req, tp)
			defer span.End()
		}
		resp := fn(ctx, &req)
		if why := answerProblem(&resp); why != "" {
			writeProblem(w, problemStepFunction, why)
			return
		}
		// Encoded before the status is written, so that an answer that does not encode is
		// a 500 rather than a 200 with no body; the buffer is pooled so that this costs no
		// allocation (BenchmarkHandler).
		buf := answerBuffers.Get().(*bytes.Buffer)
		defer putAnswerBuffer(buf)
		buf.Reset()
		if err := json.NewEncoder(buf).Encode(resp); err != nil {
			writeProblem(w, problemStepFunction, "the answer is not valid JSON: "+strings.TrimPrefix(err.Error(), "json: "))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(buf.Bytes())
	}), nil
}

// answerBuffers holds the buffers Handler encodes answers into.
var answerBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// putAnswerBuffer returns buf to answerBuffers unless one large answer grew it.
func putAnswerBuffer(buf *bytes.Buffer) {
	if buf.Cap() <= 64<<10 {
		answerBuffers.Put(buf)
	}
}

// answerProblem says what is wrong with an answer that sets other than exactly one of
// its fields, or "" when it sets one.
func answerProblem(r *Response) string {
	var buf [6]string
	got := buf[:0]
	for i, set := range [...]bool{r.Next != nil, r.Await != nil, r.Spawn != nil, r.Done != nil, r.Fail != nil, r.Retry != nil} {
		if set {
			got = append(got, [...]string{"next", "await", "spawn", "done", "fail", "retry"}[i])
		}
	}
	switch len(got) {
	case 1:
		return ""
	case 0:
		got = append(got, "none")
	}
	return "a step answers exactly one of next, await, spawn, done, fail, retry (got " + strings.Join(got, ", ") + ")"
}

// readStep decodes a step request, or answers why body is not one (a problem's detail):
// it is not JSON, not an object with job and lease objects, or its members do not fit
// StepRequest. The service's shape is read in one pass (decodeStep), anything else by
// encoding/json.
func readStep(body []byte) (StepRequest, string) {
	const notAStep = "a step request is an object with job and lease"
	req, isStep, ok := decodeStep(body)
	switch {
	case ok && isStep:
		return req, ""
	case ok:
		return StepRequest{}, notAStep
	}
	var members struct{ Job, Lease json.RawMessage }
	if err := json.Unmarshal(body, &members); err != nil {
		if _, syntax := err.(*json.SyntaxError); syntax {
			return StepRequest{}, "the body is not JSON: " + err.Error()
		}
		return StepRequest{}, notAStep // an array, a string, a number
	}
	if !isObject(members.Job) || !isObject(members.Lease) {
		return StepRequest{}, notAStep
	}
	var slow StepRequest // on the heap: declared here, so that the one pass allocates none
	if err := json.Unmarshal(body, &slow); err != nil {
		return StepRequest{}, "the body is not a step request: " + strings.TrimPrefix(err.Error(), "json: ")
	}
	return slow, ""
}

// isObject reports whether the JSON value v is an object.
func isObject(v json.RawMessage) bool { return len(v) > 0 && v[0] == '{' }

// errTooLarge is readRequest's error for a body over MaxRequestBytes.
var errTooLarge = errors.New("webhook: step request over MaxRequestBytes")

// readRequest reads a step request's body, into one buffer of its declared length when
// that is within MaxRequestBytes; a longer body is errTooLarge, refused before it is read
// when its length is declared.
func readRequest(r *http.Request) ([]byte, error) {
	n := r.ContentLength
	if n > MaxRequestBytes {
		return nil, errTooLarge
	}
	if n > 0 {
		body := make([]byte, n)
		if _, err := io.ReadFull(r.Body, body); err != nil {
			return nil, err
		}
		return body, nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxRequestBytes+1))
	if err == nil && len(body) > MaxRequestBytes {
		return nil, errTooLarge
	}
	return body, err
}

// startStepSpan continues the step request's trace: req gets its traceparent and
// tracestate, and ctx a span of the step (server kind) under the service's span of the
// attempt, from the global tracer provider: a span that records nothing unless the
// program installed an OpenTelemetry SDK, whose context the step's own spans still
// continue.
func startStepSpan(ctx context.Context, h http.Header, req *StepRequest, traceparent string) (context.Context, trace.Span) {
	req.Traceparent, req.Tracestate = traceparent, h.Get("Tracestate")
	ctx = propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(h))
	return otel.Tracer("github.com/gendurable/gendurable/webhook").Start(ctx, "step "+req.Job.Handler,
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.Int64("gendurable.job.id", req.Job.ID), attribute.String("gendurable.handler", req.Job.Handler),
			attribute.Int("gendurable.step", req.Job.Step), attribute.Int("gendurable.attempt", req.Job.Attempt)))
}
