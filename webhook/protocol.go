// Package webhook is gendurable's step protocol for handler authors: the request a step
// webhook receives, the answers it may give, and Standard Webhooks signing and
// verification. A handler in Go needs nothing else:
//
//	http.Handle("/steps", webhook.Handler(secret, func(ctx context.Context, req *webhook.StepRequest) webhook.Response {
//		if req.Job.Step < 2 {
//			return webhook.Response{Next: &webhook.Next{State: req.Job.State}}
//		}
//		return webhook.Response{Done: &webhook.Done{Result: json.RawMessage(`{"ok":true}`)}}
//	}))
package webhook

import (
	"encoding/json"
	"fmt"
	"time"
)

// StepRequest is the body of the POST a handler receives for one step.
type StepRequest struct {
	Job Job `json:"job"`
	// Signals are the job's unconsumed signals delivered before this step was claimed,
	// oldest first. Answering next, await, spawn or done consumes them.
	Signals []Signal `json:"signals"`
	// SignalsMore counts unconsumed signals not shown (the per-step cap); they come next step.
	SignalsMore int `json:"signals_more,omitempty"`
	// Children are the job's children, sent to the step that follows their join.
	Children []Child `json:"children,omitempty"`
	// ChildrenMore counts children not shown (the per-step cap).
	ChildrenMore int   `json:"children_more,omitempty"`
	Lease        Lease `json:"lease"`
	// Wake says why a parked job runs again: "signal", "children", "timeout"; empty for
	// a fresh or continued step.
	Wake string `json:"wake,omitempty"`
	// Traceparent and Tracestate are the step request's W3C trace context headers ("" when
	// it has none): the service's span of this attempt, in the trace of the job. Handler
	// also puts it in the context it passes the step function, under a span of the step
	// made with the global OpenTelemetry tracer provider (a no-op unless the program set one).
	Traceparent string `json:"-"`
	Tracestate  string `json:"-"`
}

// Job describes the job a step belongs to.
type Job struct {
	ID          int64           `json:"id"`
	Queue       string          `json:"queue"`
	Handler     string          `json:"handler"`
	Key         *string         `json:"key"`
	Step        int             `json:"step"`
	Attempt     int             `json:"attempt"`
	MaxAttempts int             `json:"max_attempts"`
	Input       json.RawMessage `json:"input"`
	State       json.RawMessage `json:"state"`
	CreatedAt   time.Time       `json:"created_at"`
}

// Signal is one delivered signal.
type Signal struct {
	ID        int64           `json:"id"`
	Name      string          `json:"name"`
	Payload   json.RawMessage `json:"payload"`
	CreatedAt time.Time       `json:"created_at"`
}

// Child is one child job and how it ended.
type Child struct {
	ID      int64           `json:"id"`
	Handler string          `json:"handler"`
	Key     *string         `json:"key"`
	Status  string          `json:"status"`
	Result  json.RawMessage `json:"result"`
	Error   json.RawMessage `json:"error"`
}

// Lease authorises the asynchronous-step endpoints (heartbeat, outcome) until ExpiresAt.
type Lease struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Response is a handler's answer to a step: exactly one field is set.
type Response struct {
	Next  *Next  `json:"next,omitempty"`
	Await *Await `json:"await,omitempty"`
	Spawn *Spawn `json:"spawn,omitempty"`
	Done  *Done  `json:"done,omitempty"`
	Fail  *Fail  `json:"fail,omitempty"`
	Retry *Retry `json:"retry,omitempty"`
}

// Next continues with the next step (after Delay), carrying State.
type Next struct {
	State json.RawMessage `json:"state,omitempty"`
	Delay Duration        `json:"delay,omitempty"`
}

// Await parks the job until a signal named in Signals arrives (any signal when empty)
// or Timeout passes (never when zero).
type Await struct {
	Signals []string        `json:"signals,omitempty"`
	Timeout Duration        `json:"timeout,omitempty"`
	State   json.RawMessage `json:"state,omitempty"`
}

// Spawn inserts Children and parks the job until every one of them has finished.
type Spawn struct {
	Children []ChildSpec     `json:"children"`
	State    json.RawMessage `json:"state,omitempty"`
}

// ChildSpec is a child job to insert (the queue defaults to the parent's).
type ChildSpec struct {
	Handler        string          `json:"handler"`
	Queue          string          `json:"queue,omitempty"`
	Input          json.RawMessage `json:"input,omitempty"`
	Key            string          `json:"key,omitempty"`
	Priority       *int            `json:"priority,omitempty"`
	Delay          Duration        `json:"delay,omitempty"`
	ConcurrencyKey string          `json:"concurrency_key,omitempty"`
	MaxAttempts    *int            `json:"max_attempts,omitempty"`
	// FairnessKey is the child's fairness key (nil: its parent's).
	FairnessKey *string `json:"fairness_key,omitempty"`
}

// Done finishes the job with Result.
type Done struct {
	Result json.RawMessage `json:"result,omitempty"`
}

// Fail finishes the job as failed, without retrying.
type Fail struct {
	Error json.RawMessage `json:"error,omitempty"`
}

// Retry runs the same step again after Delay (exponential backoff when zero); it counts
// an attempt.
type Retry struct {
	Error json.RawMessage `json:"error,omitempty"`
	Delay Duration        `json:"delay,omitempty"`
}

// Duration is a time.Duration written as a Go duration string ("500ms", "30s", "1h").
type Duration time.Duration

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"30s\" or \"1h\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid duration %q (use Go syntax such as \"500ms\", \"30s\", \"1h\")", s)
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", s)
	}
	*d = Duration(v)
	return nil
}
