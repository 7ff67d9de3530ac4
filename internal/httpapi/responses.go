package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/gendurable/gendurable/internal/engine"
)

// jobBody is a job on the wire (schema Job); the responses that extend it (JobInserted,
// JobDetail) embed it so that the conversion below is the only one.
// jobBody is j as the API writes it; its pointers point into *j.
func jobBody(j *engine.Job) Job {
	out := Job{
		Id: j.ID, Queue: j.Queue, Handler: j.Handler, Status: JobStatus(j.Status), Priority: j.Priority,
		Input: j.Input, State: j.State, Result: j.Result, Error: j.Error, Step: j.Step, Attempt: j.Attempt,
		MaxAttempts: j.MaxAttempts, Key: j.Key, ConcurrencyKey: j.ConcurrencyKey, ParentId: j.ParentID,
		PendingChildren: j.PendingChildren, Wake: j.Wake, CancelRequested: &j.CancelRequested,
		LeaseExpiresAt: j.LeaseExpiresAt, LeaseOwner: j.LeaseOwner, AttemptedAt: j.AttemptedAt,
		CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, FinishedAt: j.FinishedAt,
		ScheduleName: j.ScheduleName, ScheduleTick: j.ScheduleTick, DebounceKey: j.DebounceKey, RerunOf: j.RerunOf,
		FairnessKey: j.FairnessKey,
	}
	out.EligibleAt = j.EligibleAt
	if j.TraceContext != nil {
		parent, state := engine.SplitTraceContext(*j.TraceContext)
		out.Traceparent = &parent
		if state != "" {
			out.Tracestate = &state
		}
	}
	if j.Awaiting != nil {
		out.Awaiting = &j.Awaiting
	}
	if j.RateLimit != nil {
		out.RateLimit = &RateLimitRef{Name: *j.RateLimit, Key: j.RateKey, Weight: &j.RateWeight}
	}
	if j.RateLimits != nil {
		limits := make([]RateLimitRef, len(j.RateLimits))
		for i := range j.RateLimits {
			l := &j.RateLimits[i]
			limits[i] = RateLimitRef{Name: l.Name, Weight: &l.Weight}
			if l.Key != "" {
				limits[i].Key = &l.Key
			}
		}
		out.RateLimits = &limits
	}
	if out.Input == nil {
		out.Input = json.RawMessage("null")
	}
	return out
}

type jobInsertedBody struct {
	Job
	Deduplicated bool `json:"deduplicated"`
	Debounced    bool `json:"debounced,omitempty"`
}

type jobDetailBody struct {
	Job
	SignalsTotal     int64 `json:"signals_total"`
	SignalsPending   int64 `json:"signals_pending"`
	ChildrenTotal    int   `json:"children_total"`
	ChildrenFinished int   `json:"children_finished"`
}

// jsonResponse answers any operation whose body is built from the types above.
type jsonResponse struct {
	status int
	body   any
}

func (r jsonResponse) write(w http.ResponseWriter) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(r.status)
	return json.NewEncoder(w).Encode(r.body)
}

func (r jsonResponse) VisitInsertJobResponse(w http.ResponseWriter) error  { return r.write(w) }
func (r jsonResponse) VisitInsertJobsResponse(w http.ResponseWriter) error { return r.write(w) }
func (r jsonResponse) VisitGetJobResponse(w http.ResponseWriter) error     { return r.write(w) }

// handlerBody shows a handler; a read-scope caller sees its secret redacted.
func handlerBody(h engine.Handler, scope string) HandlerConfig {
	secret := h.Secret
	if scope != scopeAdmin {
		secret = "whsec_…(redacted: admin scope only)"
	}
	return HandlerConfig{Name: h.Name, Url: h.URL, Secret: secret, MaxAttempts: h.MaxAttempts,
		Timeout: h.Timeout.String(), BackoffBase: h.BackoffBase.String(), BackoffMax: h.BackoffMax.String(),
		PreviousSecretExpiresAt: h.PreviousSecretExpiresAt, CreatedAt: h.CreatedAt, UpdatedAt: h.UpdatedAt,
		Breaker: breakerBody(h.Breaker)}
}

func breakerBody(b engine.Breaker) Breaker {
	return Breaker{Threshold: b.Threshold, ProbeInterval: b.ProbeInterval.String(), ProbeIntervalMax: b.ProbeIntervalMax.String(),
		PauseAfter: b.PauseAfter.String(), State: BreakerState(b.State), ConsecutiveFailures: b.ConsecutiveFailures,
		OpenedAt: b.OpenedAt, NextProbeAt: b.NextProbeAt, Opens: b.Opens, Paused: b.PausedAt != nil,
		PausedAt: b.PausedAt, PausedReason: b.PausedReason}
}

func queueBody(q engine.Queue) Queue {
	c := q.Counts
	out := Queue{Name: q.Name, Paused: q.Paused, MaxInFlight: q.MaxInFlight, Batch: q.Batch,
		Counts: QueueCounts{Runnable: c.Runnable, Executing: c.Executing, Awaiting: c.Awaiting, Done: c.Done,
			Failed: c.Failed, Cancelled: c.Cancelled},
		StepBodies: StepBodiesSetting(q.StepBodies), Fairness: FairnessSetting(q.Fairness),
		OldestRunnableAt: q.OldestRunnableAt, CreatedAt: q.CreatedAt, UpdatedAt: q.UpdatedAt}
	if q.Retention != nil {
		r := q.Retention.String()
		out.Retention = &r
	}
	return out
}

// stepBodiesBody is a history row's bodies as the API shows them (nil: none kept).
func stepBodiesBody(b *engine.StepBodies) *StepBodies {
	if b == nil {
		return nil
	}
	return &StepBodies{Request: stepBodyBody(b.Request), Response: stepBodyBody(b.Response)}
}

// stepBodyBody shows a kept body as the JSON value it holds when its text parses (a
// truncated one seldom does), else as a string.
func stepBodyBody(b *engine.StepBody) *StepBody {
	if b == nil {
		return nil
	}
	out := &StepBody{Format: StepBodyText, Size: b.Size, Truncated: b.Truncated}
	if text := []byte(b.Text); len(bytes.TrimSpace(text)) > 0 && json.Valid(text) {
		out.Format, out.Body = StepBodyJSON, text
	} else {
		out.Body, _ = json.Marshal(b.Text)
	}
	return out
}
