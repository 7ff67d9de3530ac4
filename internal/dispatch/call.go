package dispatch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/webhook"
)

// maxRetryAfter caps how long a Retry-After header may postpone an attempt.
const maxRetryAfter = 24 * time.Hour

// runStep calls the step's webhook and hands its outcome to the completer. The slot is
// freed once the outcome is written (or at once for an asynchronous 202 step).
func (d *Dispatcher) runStep(ctx context.Context, f *feeder, st engine.Step) {
	outcome, deliver := d.call(ctx, st)
	if !deliver {
		d.leases.remove(st.ID, st.LeaseToken)
		f.release()
		return
	}
	d.leases.markCompleting(st.ID, st.LeaseToken)
	d.completer.submit(engine.StepOutcome{JobID: st.ID, Token: st.LeaseToken, NoGateSlot: st.GateShard == nil, Outcome: outcome},
		func(applied *pg.OutcomeApplied, err error) {
			d.leases.remove(st.ID, st.LeaseToken)
			d.metrics.Steps.WithLabelValues(st.Queue, st.Handler, outcome.Label).Inc()
			switch {
			case err != nil:
				d.log.Error("writing a step's outcome failed; the step will run again after its lease expires",
					"job_id", st.ID, "err", err)
			case applied == nil:
				d.metrics.LeaseLost.WithLabelValues("outcome").Inc()
				d.log.Warn("outcome refused: the lease token is no longer current (the step was taken back)",
					"job_id", st.ID, "step", st.Step, "attempt", st.Attempt)
			case applied.Ready:
				f.wake() // an outcome only changes its own job, which is on this queue
			}
			f.release()
		})
}

// call POSTs one step to its handler and turns the answer into an outcome. deliver is
// false when there is nothing to write: a 202 (the handler reports later through the
// API) or a call abandoned because its lease was lost or the grace period ended.
func (d *Dispatcher) call(ctx context.Context, st engine.Step) (o engine.Outcome, deliver bool) {
	if st.HandlerURL == nil {
		return engine.ErrorOutcome("handler_missing",
			fmt.Sprintf("no handler named %q is registered (PUT /v1/handlers/%s)", st.Handler, st.Handler), nil, nil, nil), true
	}
	body, err := json.Marshal(stepRequest(st))
	if err != nil {
		return engine.FailOutcome("bad_request", "encoding the step request: "+err.Error(), nil), true
	}
	if len(body) > d.cfg.MaxBodyBytes {
		return engine.FailOutcome("request_too_large", fmt.Sprintf(
			"the step request is %d bytes, over the %d-byte cap (input, state and signals are too large)",
			len(body), d.cfg.MaxBodyBytes), nil), true
	}
	timeout := 30 * time.Second
	if st.TimeoutMS != nil {
		timeout = time.Duration(*st.TimeoutMS) * time.Millisecond
	}
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(callCtx, http.MethodPost, *st.HandlerURL, bytes.NewReader(body))
	if err != nil {
		return engine.ErrorOutcome("connection_error", "building the request: "+err.Error(), nil, nil, nil), true
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "gendurable")
	secrets := []string{*st.Secret}
	if st.PreviousSecret != nil && st.PreviousSecretExpiresAt != nil && time.Now().Before(*st.PreviousSecretExpiresAt) {
		secrets = append(secrets, *st.PreviousSecret)
	}
	msgID := fmt.Sprintf("job_%d_step_%d_attempt_%d_%.8s", st.ID, st.Step, st.Attempt, st.LeaseToken)
	if err := webhook.SetHeaders(req.Header, msgID, time.Now(), body, secrets...); err != nil {
		return engine.FailOutcome("bad_secret", "signing the step request: "+err.Error(), nil), true
	}

	started := time.Now()
	resp, err := d.client.Do(req)
	if err != nil {
		d.metrics.WebhookDuration.WithLabelValues(st.Handler, "error").Observe(time.Since(started).Seconds())
		if ctx.Err() != nil { // lease lost or shutdown: not this attempt's fault
			return engine.Outcome{}, false
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return engine.ErrorOutcome("timeout", fmt.Sprintf("the handler did not answer within %s", timeout),
				nil, nil, map[string]any{"timeout": timeout.String()}), true
		}
		return engine.ErrorOutcome("connection_error", "calling the handler: "+err.Error(), nil, nil, nil), true
	}
	defer resp.Body.Close()
	respBody, readErr := io.ReadAll(io.LimitReader(resp.Body, int64(d.cfg.MaxBodyBytes)+1))
	d.metrics.WebhookDuration.WithLabelValues(st.Handler, statusClass(resp.StatusCode)).Observe(time.Since(started).Seconds())
	status := resp.StatusCode
	switch {
	case readErr != nil:
		if ctx.Err() != nil {
			return engine.Outcome{}, false
		}
		if errors.Is(readErr, context.DeadlineExceeded) {
			return engine.ErrorOutcome("timeout", fmt.Sprintf("the handler's answer did not arrive within %s", timeout),
				&status, nil, nil), true
		}
		return engine.ErrorOutcome("bad_response", "reading the answer: "+readErr.Error(), &status, nil, nil), true
	case len(respBody) > d.cfg.MaxBodyBytes:
		return engine.ErrorOutcome("response_too_large", fmt.Sprintf(
			"the answer is over the %d-byte cap", d.cfg.MaxBodyBytes), &status, nil, nil), true
	case status == http.StatusAccepted:
		return engine.Outcome{}, false // asynchronous step: heartbeat + outcome come through the API
	case status >= 200 && status < 300:
		o, err := engine.DecodeResponse(respBody)
		if err != nil {
			return engine.ErrorOutcome("bad_response", err.Error(), &status, nil,
				map[string]any{"body": snippet(respBody)}), true
		}
		o.HTTPStatus = &status
		return o, true
	case status >= 300 && status < 400:
		return engine.ErrorOutcome("redirect", fmt.Sprintf(
			"the handler answered %d; redirects are not followed (Location: %q)", status, resp.Header.Get("Location")),
			&status, nil, nil), true
	default:
		var after *time.Duration
		if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
			after = retryAfter(resp.Header.Get("Retry-After"), time.Now())
		}
		return engine.ErrorOutcome("http_error", fmt.Sprintf("the handler answered %d", status), &status, after,
			map[string]any{"status": status, "body": snippet(respBody)}), true
	}
}

// stepRequest builds the body of a step's POST.
func stepRequest(st engine.Step) webhook.StepRequest {
	r := webhook.StepRequest{
		Job: webhook.Job{ID: st.ID, Queue: st.Queue, Handler: st.Handler, Key: st.Key, Step: st.Step,
			Attempt: st.Attempt, MaxAttempts: st.MaxAttempts, Input: st.Input, State: st.State, CreatedAt: st.CreatedAt},
		Signals:      make([]webhook.Signal, len(st.Signals)),
		SignalsMore:  st.SignalsMore,
		ChildrenMore: st.ChildrenMore,
		Lease:        webhook.Lease{Token: st.LeaseToken, ExpiresAt: st.LeaseExpiresAt},
	}
	if len(r.Job.State) == 0 {
		r.Job.State = json.RawMessage("null")
	}
	if st.Wake != nil {
		r.Wake = *st.Wake
	}
	for i, s := range st.Signals {
		r.Signals[i] = webhook.Signal{ID: s.ID, Name: s.Name, Payload: nullIfEmpty(s.Payload), CreatedAt: s.CreatedAt}
	}
	for _, c := range st.Children {
		r.Children = append(r.Children, webhook.Child{ID: c.ID, Handler: c.Handler, Key: c.Key, Status: c.Status,
			Result: nullIfEmpty(c.Result), Error: nullIfEmpty(c.Error)})
	}
	return r
}

func nullIfEmpty(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
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

func statusClass(code int) string {
	return strconv.Itoa(code/100) + "xx"
}
