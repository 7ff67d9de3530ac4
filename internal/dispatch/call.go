package dispatch

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/webhookclient"
	"github.com/gendurable/gendurable/webhook"
)

// maxSigners bounds the signing keys kept (one per secret in use).
const maxSigners = 1024

// maxRetryAfter caps how long a Retry-After header may postpone an attempt.
const maxRetryAfter = 24 * time.Hour

// runStep calls the step's webhook and hands its outcome to the completer. The slot
// (max_in_flight counts webhook calls) is freed as soon as the call is over: the outcome
// is written in a later batch, its lease heartbeated until then, and the completer's
// bounded queue holds the feeder back when outcomes pile up. Holding the slot until the
// write (batching linger plus statement) kept a quarter of the slots idle under load.
//
// A step in flight is a goroutine (a step runner: see stepRunners) parked until its
// answer arrives, and what it holds while it waits is most of what a step in flight
// costs. It waits in Exchange.Wait, called from here: the request is built, signed and
// sent (startCall) and the answer read and interpreted (endCall) in frames of their
// own, so their locals are not on the waiting stack, and the connection holds no read
// buffer until the answer is there (10 000 steps held in flight: server RSS 152 -> 130
// MiB). The runner's stack stays at 4 KiB: the runtime halves a parked stack only while
// it uses under a quarter of it, counting 800 bytes more than it does. Every function
// on the way keeps its frame small (see outcomeOf), so that 4 KiB is enough.
//
// The queue's step_bodies setting (cached by its feeder) says whether the attempt's
// request and answer bodies go into its history row.
func (d *Dispatcher) runStep(ctl *callControl, f *feeder, st *engine.Step) {
	c, outcome := d.startCall(ctl, st)
	if c != nil {
		c.exchange.Wait()
		outcome = d.endCall(ctl, st, c, f.settings.Load().StepBodies)
	}
	d.finishStep(ctl, f, st, outcome)
}

// finishStep records a probe's result, frees the step's slot and, unless outcome is nil
// (nothing to write), queues the outcome for the completer with its breaker note.
//
//go:noinline
func (d *Dispatcher) finishStep(ctl *callControl, f *feeder, st *engine.Step, outcome *engine.Outcome) {
	if st.Span != nil {
		endAttemptSpan(st, outcome, ctl.aborted())
	}
	if outcome == nil {
		answered := !ctl.aborted() // a 202: the handler is up
		d.recordProbe(st, verdictSuccess, answered)
		d.leases.remove(st.ID, st.LeaseToken)
		f.release(st)
		return
	}
	verdict := verdictOf(outcome)
	note := noteOf(st, verdict)
	if d.recordProbe(st, verdict, verdict != verdictNone || outcome.HTTPStatus != nil) {
		note.verdict = verdictNone // the probe's result is recorded already
	}
	d.leases.markCompleting(st.ID, st.LeaseToken)
	defer f.release(st)
	d.completer.submit(st, outcome, note,
		func(applied *engine.OutcomeApplied, err error) {
			d.leases.remove(st.ID, st.LeaseToken)
			d.metrics.Steps.WithLabelValues(st.Queue, st.Handler, outcome.Label).Inc()
			switch {
			case err != nil:
				d.log.Error("writing a step's outcome failed; the step will run again after its lease expires",
					"job_id", st.ID, "err", err, "trace_id", stepTraceID(st))
			case applied == nil:
				d.metrics.LeaseLost.WithLabelValues("outcome").Inc()
				d.log.Warn("outcome refused: the lease token is no longer current (the step was taken back)",
					"job_id", st.ID, "step", st.Step, "attempt", st.Attempt, "trace_id", stepTraceID(st))
			case applied.Ready:
				f.wake() // an outcome only changes its own job, which is on this queue
			}
		})
}

// signedRequest is a step's signed webhook request, ready to send.
type signedRequest struct {
	body []byte
	// headers are the Standard Webhooks headers, then traceparent and tracestate when
	// the step carries a trace (nheaders in all).
	headers  [5]webhookclient.Header
	nheaders int
	timeout  time.Duration
}

// stepCall is a step's webhook call under way.
type stepCall struct {
	req      *signedRequest
	started  time.Time
	exchange *webhookclient.Exchange
}

// startCall builds, signs and sends the step's request, or answers the outcome that
// refuses it.
//
//go:noinline
func (d *Dispatcher) startCall(ctl *callControl, st *engine.Step) (*stepCall, *engine.Outcome) {
	req, refused := d.prepareCall(st)
	if refused != nil {
		return nil, refused
	}
	started := time.Now()
	// No context: the heartbeat and the shutdown end the call through ctl.
	x := d.client.NewExchange(context.Background(), started.Add(req.timeout), *st.HandlerURL, req.headers[:req.nheaders],
		req.body, d.cfg.MaxBodyBytes)
	ctl.attach(x)
	x.Send()
	return &stepCall{req: req, started: started, exchange: x}, nil
}

// endCall reads the call's answer and turns it into an outcome, with the bodies of the
// call when the queue's setting bodies keeps them for that outcome. It answers nil when
// there is nothing to write: a 202 (the handler reports later through the API) or a
// call abandoned because its lease was lost or the grace period ended.
//
//go:noinline
func (d *Dispatcher) endCall(ctl *callControl, st *engine.Step, c *stepCall, bodies string) *engine.Outcome {
	resp, err := c.exchange.Finish()
	return d.interpretAnswer(ctl, st, c.req, bodies, c.started, &resp, err)
}

// prepareCall builds and signs the step's request, or answers the outcome that refuses
// it (no handler, a body over the cap, a secret that does not decode).
//
//go:noinline
func (d *Dispatcher) prepareCall(st *engine.Step) (*signedRequest, *engine.Outcome) {
	if st.HandlerURL == nil {
		return nil, handlerMissingOutcome(st.Handler)
	}
	body := appendStepBody(make([]byte, 0, stepBodySize(st)), st)
	if len(body) > d.cfg.MaxBodyBytes {
		return nil, requestTooLargeOutcome(len(body), d.cfg.MaxBodyBytes)
	}
	timeout := 30 * time.Second
	if st.TimeoutMS != nil {
		timeout = time.Duration(*st.TimeoutMS) * time.Millisecond
	}
	now := time.Now()
	msgID := webhookID(st)
	sig, err := d.sign(nil, *st.Secret, msgID, now.Unix(), body)
	if err == nil && st.PreviousSecret != nil && st.PreviousSecretExpiresAt != nil && now.Before(*st.PreviousSecretExpiresAt) {
		sig, err = d.sign(append(sig, ' '), *st.PreviousSecret, msgID, now.Unix(), body)
	}
	if err != nil {
		return nil, badSecretOutcome(err)
	}
	req := &signedRequest{body: body, timeout: timeout, nheaders: 3, headers: [...]webhookclient.Header{ // the Standard Webhooks names
		{Name: "Webhook-Id", Value: msgID},
		{Name: "Webhook-Timestamp", Value: strconv.FormatInt(now.Unix(), 10)},
		{Name: "Webhook-Signature", Value: string(sig)},
		{}, {},
	}}
	if st.Span != nil || st.Trace != nil {
		req.nheaders = traceHeaders(st, &req.headers, req.nheaders)
	}
	return req, nil
}

// The outcomes that refuse a call before it is made, each in a function of its own to
// keep prepareCall's frame small (see outcomeOf).

//go:noinline
func handlerMissingOutcome(handler string) *engine.Outcome {
	o := engine.ErrorOutcome("handler_missing",
		fmt.Sprintf("no handler named %q is registered (PUT /v1/handlers/%s)", handler, handler), nil, nil, nil)
	return &o
}

//go:noinline
func requestTooLargeOutcome(size, limit int) *engine.Outcome {
	o := engine.FailOutcome("request_too_large", fmt.Sprintf(
		"the step request is %d bytes, over the %d-byte cap (input, state and signals are too large)",
		size, limit), nil)
	return &o
}

//go:noinline
func badSecretOutcome(err error) *engine.Outcome {
	o := engine.FailOutcome("bad_secret", "signing the step request: "+err.Error(), nil)
	return &o
}

// interpretAnswer turns the webhook call's answer (or its error) into the step's
// outcome; nil when there is nothing to write. The outcome carries the request body
// and the answer's (none for a call that got no answer) when the queue's step_bodies
// setting keeps them for this outcome; the headers are never kept (the signature is
// derived from the secret).
//
//go:noinline
func (d *Dispatcher) interpretAnswer(ctl *callControl, st *engine.Step, req *signedRequest, bodies string,
	started time.Time, resp *webhookclient.Response, err error) *engine.Outcome {
	o := d.outcomeOf(ctl, st, req.timeout, started, resp, err)
	if o == nil {
		return nil
	}
	if engine.KeepsBodies(bodies, o.Kind) {
		o.Bodies = d.eng.StepBodies(req.body, resp.Body, err == nil)
		if err == nil && resp.TooLarge { // the answer was over the cap and was not kept at all
			o.Bodies.Response.Size, o.Bodies.Response.Truncated = d.cfg.MaxBodyBytes, true
		}
	}
	return o
}

type webhookSeriesKey struct{ handler, class string }

// webhookObserver is the WebhookDuration series of handler and status class. It runs on
// the step's runner, whose stack is 4 KiB: WithLabelValues (which validates
// and hashes the label values on every call) took that stack past 4 KiB, and every step
// paid a stack copy for it (runtime.copystack under validateLabelValues: 5 % of the
// server's CPU in a drain's profile). A typed map, read through an atomic pointer and
// copied on the rare write, does not (a sync.Map hashed its struct key with the
// runtime's generic typehash, deep enough to copy the stack again).
func (d *Dispatcher) webhookObserver(handler, class string) prometheus.Observer {
	k := webhookSeriesKey{handler, class}
	if m := d.webhookSeries.Load(); m != nil {
		if o, ok := (*m)[k]; ok {
			return o
		}
	}
	return d.addWebhookSeries(k)
}

//go:noinline
func (d *Dispatcher) addWebhookSeries(k webhookSeriesKey) prometheus.Observer {
	d.webhookSeriesMu.Lock()
	defer d.webhookSeriesMu.Unlock()
	var m map[webhookSeriesKey]prometheus.Observer
	if old := d.webhookSeries.Load(); old != nil {
		if o, ok := (*old)[k]; ok {
			return o
		}
		m = maps.Clone(*old)
	} else {
		m = map[webhookSeriesKey]prometheus.Observer{}
	}
	o := d.metrics.WebhookDuration.WithLabelValues(k.handler, k.class)
	m[k] = o
	d.webhookSeries.Store(&m)
	return o
}

// outcomeOf is the outcome of the call's answer (or of its error); nil when there is
// nothing to write. The happy path (a 2xx answer that decodes) is all this function
// holds: every other case is built in a function of its own, so that the frames on
// the step's small stack stay small (an engine.Outcome is 184 bytes, and each case's
// copy of it took a slot in this frame: 1.7 kB, and a stack copy a step).
func (d *Dispatcher) outcomeOf(ctl *callControl, st *engine.Step, timeout time.Duration, started time.Time,
	resp *webhookclient.Response, err error) *engine.Outcome {
	if err != nil {
		d.webhookObserver(st.Handler, "error").Observe(time.Since(started).Seconds())
		return failedCallOutcome(ctl.aborted(), timeout, err)
	}
	d.webhookObserver(st.Handler, statusClass(resp.Status)).Observe(time.Since(started).Seconds())
	status := resp.Status
	if status < 200 || status >= 300 || status == http.StatusAccepted || resp.TooLarge {
		return d.refusedAnswerOutcome(resp)
	}
	o := new(engine.Outcome)
	if *o, err = engine.DecodeResponse(resp.Body); err != nil {
		return unreadableAnswerOutcome(status, resp.Body, err)
	}
	o.HTTPStatus = &status
	return o
}

// failedCallOutcome is the outcome of a call that got no answer; nil when the call was
// aborted (lease lost or shutdown: not this attempt's fault).
//
//go:noinline
func failedCallOutcome(aborted bool, timeout time.Duration, err error) *engine.Outcome {
	var o engine.Outcome
	switch {
	case aborted:
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		o = engine.ErrorOutcome("timeout", fmt.Sprintf("the handler did not answer within %s", timeout),
			nil, nil, map[string]any{"timeout": timeout.String()})
	case errors.Is(err, webhookclient.ErrBadResponse):
		o = engine.ErrorOutcome("bad_response", "reading the answer: "+err.Error(), nil, nil, nil)
	default:
		o = engine.ErrorOutcome("connection_error", "calling the handler: "+err.Error(), nil, nil, nil)
	}
	return &o
}

// unreadableAnswerOutcome is the outcome of a 2xx answer that is not a step response.
//
//go:noinline
func unreadableAnswerOutcome(status int, body []byte, err error) *engine.Outcome {
	o := engine.ErrorOutcome("bad_response", err.Error(), &status, nil, map[string]any{"body": snippet(body)})
	return &o
}

// refusedAnswerOutcome is the outcome of every answer but a 2xx step response: one over
// the size cap, a redirect, an error status; nil for a 202 (an asynchronous step: its
// heartbeats and outcome come through the API).
//
//go:noinline
func (d *Dispatcher) refusedAnswerOutcome(resp *webhookclient.Response) *engine.Outcome {
	status := resp.Status
	var o engine.Outcome
	switch {
	case resp.TooLarge:
		o = engine.ErrorOutcome("response_too_large", fmt.Sprintf(
			"the answer is over the %d-byte cap", d.cfg.MaxBodyBytes), &status, nil, nil)
	case status == http.StatusAccepted:
		return nil
	case status >= 300 && status < 400:
		o = engine.ErrorOutcome("redirect", fmt.Sprintf(
			"the handler answered %d; redirects are not followed (Location: %q)", status, resp.Location),
			&status, nil, nil)
	default:
		var after *time.Duration
		if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
			after = retryAfter(resp.RetryAfter, time.Now())
		}
		o = engine.ErrorOutcome("http_error", fmt.Sprintf("the handler answered %d", status), &status, after,
			map[string]any{"status": status, "body": snippet(resp.Body)})
	}
	return &o
}

// webhookID is the step attempt's webhook-id: job_<id>_step_<n>_attempt_<n>_<token prefix>.
func webhookID(st *engine.Step) string {
	b := make([]byte, 0, 64)
	b = append(b, "job_"...)
	b = strconv.AppendInt(b, st.ID, 10)
	b = append(b, "_step_"...)
	b = strconv.AppendInt(b, int64(st.Step), 10)
	b = append(b, "_attempt_"...)
	b = strconv.AppendInt(b, int64(st.Attempt), 10)
	b = append(b, '_')
	b = append(b, st.LeaseToken[:min(8, len(st.LeaseToken))]...)
	return string(b)
}

// stepBodySize is a capacity that holds a step's body without growing.
func stepBodySize(st *engine.Step) int {
	n := 320 + len(st.Queue) + len(st.Handler) + len(st.Input) + len(st.State)
	if st.Key != nil {
		n += len(*st.Key)
	}
	for _, s := range st.Signals {
		n += 96 + len(s.Name) + len(s.Payload)
	}
	for _, c := range st.Children {
		n += 96 + len(c.Handler) + len(c.Result) + len(c.Error)
	}
	return n
}

// sign appends the signature of one secret, with the secret's decoded key and HMAC
// states kept per secret (a handful per process: one per handler and rotation).
func (d *Dispatcher) sign(dst []byte, secret, id string, unix int64, body []byte) ([]byte, error) {
	v, ok := d.signers.Load(secret)
	if !ok {
		s, err := webhook.NewSigner(secret)
		if err != nil {
			return nil, err
		}
		if d.signerCount.Add(1) > maxSigners { // rotated-away secrets: start over
			d.signers.Clear()
			d.signerCount.Store(1)
		}
		v, _ = d.signers.LoadOrStore(secret, s)
	}
	return v.(*webhook.Signer).AppendSignature(dst, id, unix, body), nil
}

// retryAfter reads a Retry-After header (seconds or an HTTP date), capped at a day.
func retryAfter(h string, now time.Time) *time.Duration {
	if h == "" {
		return nil
	}
	var d time.Duration
	if secs, err := strconv.Atoi(h); err == nil && secs >= 0 {
		d = time.Duration(secs) * time.Second
	} else if t, err := http.ParseTime(h); err == nil {
		d = max(t.Sub(now), 0)
	} else {
		return nil
	}
	d = min(d, maxRetryAfter)
	return &d
}

func snippet(b []byte) string {
	const n = 512
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

var statusClasses = [...]string{"0xx", "1xx", "2xx", "3xx", "4xx", "5xx"}

func statusClass(code int) string {
	if c := code / 100; c >= 0 && c < len(statusClasses) {
		return statusClasses[c]
	}
	return strconv.Itoa(code/100) + "xx"
}
