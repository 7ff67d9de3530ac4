// Package gendurable is the Go client of the gendurable API. Everything in client.gen.go
// is generated from openapi.yaml by oapi-codegen (client mode): one method per operation
// on [ClientWithResponses], with the request and response types of the spec. This file
// adds the few helpers most callers want: a constructor with a bearer token, errors typed
// from problem+json ([ProblemError]), and Insert, Signal, Wait and the asynchronous-step
// calls that answer the decoded value or that error.
//
// The step handler side (verifying the signature, decoding a step, answering next, await,
// spawn, done, fail or retry) is package [github.com/gendurable/gendurable/webhook].
//
//	c, _ := gendurable.New("http://localhost:8080")
//	job, err := c.Insert(ctx, gendurable.JobInsert{Handler: "greeter", Input: gendurable.JSON(map[string]any{"name": "Ada"})})
//	done, err := c.Wait(ctx, job.Id)
package gendurable

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"

	"github.com/gendurable/gendurable/webhook"
)

// Client is the generated client with the helpers below.
type Client struct {
	*ClientWithResponses
}

// New returns a client of the server at baseURL ("http://localhost:8080"). Options are the
// generated ones (WithHTTPClient, WithRequestEditorFn) and [WithBearerToken].
//
// Every request carries the trace context of its ctx, written by the global OpenTelemetry
// propagator (otel.SetTextMapPropagator; none is set unless the program sets one): a job
// inserted inside a span is then kept in that span's trace, and its steps continue it.
func New(baseURL string, opts ...ClientOption) (*Client, error) {
	opts = append([]ClientOption{WithRequestEditorFn(func(ctx context.Context, req *http.Request) error {
		otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(req.Header))
		return nil
	})}, opts...)
	c, err := NewClientWithResponses(baseURL, opts...)
	if err != nil {
		return nil, err
	}
	return &Client{c}, nil
}

// WithBearerToken sends "Authorization: Bearer <token>" (GENDURABLE_API_TOKEN or an API key)
// with every request.
func WithBearerToken(token string) ClientOption {
	return WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+token)
		return nil
	})
}

// JSON marshals v for the json.RawMessage fields of requests (input, payload); it panics
// on a value encoding/json cannot marshal, as only a programming error makes one.
func JSON(v any) *json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("gendurable.JSON: %v", err))
	}
	raw := json.RawMessage(b)
	return &raw
}

// ProblemType is the type URI of a problem kind the server answers with.
const (
	ProblemValidation = "urn:gendurable:problem:validation"
	ProblemNotFound   = "urn:gendurable:problem:not-found"
	ProblemConflict   = "urn:gendurable:problem:conflict"
	ProblemLeaseLost  = "urn:gendurable:problem:lease-lost"
	ProblemTooLarge   = "urn:gendurable:problem:too-large"
	ProblemForbidden  = "urn:gendurable:problem:forbidden"
	ProblemUnauth     = "urn:gendurable:problem:unauthorized"
)

// ProblemError is a non-2xx answer: the RFC 9457 problem the server sent, or one made up
// from the status when the body is not a problem document (a proxy's error page).
type ProblemError struct {
	Problem
	// Body is the answer's body as received.
	Body []byte
}

// Error reads "gendurable: 422 The request is not valid: <detail>", or lists the field
// errors when the problem has no detail.
func (e *ProblemError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "gendurable: %d %s", e.Status, e.Title)
	if e.Detail != nil && *e.Detail != "" {
		b.WriteString(": " + *e.Detail)
	} else if e.Errors != nil {
		for i, f := range *e.Errors {
			if i == 0 {
				b.WriteString(" (")
			} else {
				b.WriteString("; ")
			}
			b.WriteString(f.Field + ": " + f.Message)
		}
		b.WriteString(")")
	}
	return b.String()
}

// FieldErrors maps each field the server named (e.g. "jobs/3/priority") to its message.
func (e *ProblemError) FieldErrors() map[string]string {
	m := map[string]string{}
	if e.Errors != nil {
		for _, f := range *e.Errors {
			m[f.Field] = f.Message
		}
	}
	return m
}

// IsProblem reports whether err is a [ProblemError] of the given type URI
// ([ProblemNotFound], …).
func IsProblem(err error, problemType string) bool {
	var p *ProblemError
	return errors.As(err, &p) && p.Type == problemType
}

// CheckResponse returns nil for a 2xx answer and a [*ProblemError] for any other, for
// callers of the generated methods: CheckResponse(r.HTTPResponse, r.Body).
func CheckResponse(resp *http.Response, body []byte) error {
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	e := &ProblemError{Body: body}
	mediaType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mediaType != "application/problem+json" || json.Unmarshal(body, &e.Problem) != nil || e.Status == 0 {
		e.Problem = Problem{Type: "about:blank", Title: http.StatusText(resp.StatusCode), Status: resp.StatusCode}
		if detail := strings.TrimSpace(string(body)); detail != "" {
			e.Detail = &detail
		}
	}
	return e
}

// answer picks the decoded body the call succeeded with, or the error it failed with.
func answer[T any](err error, resp *http.Response, body []byte, decoded ...*T) (*T, error) {
	if err != nil {
		return nil, err
	}
	if err := CheckResponse(resp, body); err != nil {
		return nil, err
	}
	for _, d := range decoded {
		if d != nil {
			return d, nil
		}
	}
	return nil, fmt.Errorf("gendurable: unexpected %d answer: %.200s", resp.StatusCode, body)
}

// Insert inserts one job. With a key a live job already holds it answers that job, with
// Deduplicated set.
func (c *Client) Insert(ctx context.Context, job JobInsert) (*JobInserted, error) {
	r, err := c.InsertJobWithResponse(ctx, nil, job)
	if err != nil {
		return nil, err
	}
	return answer(nil, r.HTTPResponse, r.Body, r.JSON201, r.JSON200)
}

// InsertBatch inserts up to 10 000 jobs in one request and one statement, answering them
// in request order; one invalid job refuses the batch.
func (c *Client) InsertBatch(ctx context.Context, jobs []JobInsert) ([]JobInserted, error) {
	r, err := c.InsertJobsWithResponse(ctx, nil, JobBatch{Jobs: jobs})
	if err != nil {
		return nil, err
	}
	res, err := answer(nil, r.HTTPResponse, r.Body, r.JSON200)
	if err != nil {
		return nil, err
	}
	return res.Jobs, nil
}

// Signal delivers a signal named name with payload (nil for none) to job id.
func (c *Client) Signal(ctx context.Context, id int64, name string, payload any) (*SignalSent, error) {
	body := SignalSend{Name: name}
	if payload != nil {
		body.Payload = JSON(payload)
	}
	r, err := c.SendSignalWithResponse(ctx, id, nil, body)
	if err != nil {
		return nil, err
	}
	return answer(nil, r.HTTPResponse, r.Body, r.JSON202)
}

// SignalByKey delivers a signal to the live job that holds key.
func (c *Client) SignalByKey(ctx context.Context, key, name string, payload any) (*SignalSent, error) {
	body := SignalSendByKey{Key: key, Name: name}
	if payload != nil {
		body.Payload = JSON(payload)
	}
	r, err := c.SendSignalByKeyWithResponse(ctx, nil, body)
	if err != nil {
		return nil, err
	}
	return answer(nil, r.HTTPResponse, r.Body, r.JSON202)
}

// Get answers one job with its inbox and children counts.
func (c *Client) Get(ctx context.Context, id int64) (*JobDetail, error) {
	r, err := c.GetJobWithResponse(ctx, id)
	if err != nil {
		return nil, err
	}
	return answer(nil, r.HTTPResponse, r.Body, r.JSON200)
}

// Terminal lists the statuses a job ends in.
var Terminal = []JobStatus{"done", "failed", "cancelled"}

// Wait polls job id until its status is one of statuses (by default [Terminal]) and
// answers it, or ctx ends. Polls start at 20ms apart and back off to 1s.
func (c *Client) Wait(ctx context.Context, id int64, statuses ...JobStatus) (*JobDetail, error) {
	if len(statuses) == 0 {
		statuses = Terminal
	}
	pause := 20 * time.Millisecond
	for {
		job, err := c.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		if slices.Contains(statuses, job.Status) {
			return job, nil
		}
		select {
		case <-ctx.Done():
			return job, fmt.Errorf("gendurable: job %d is %s, still not %v: %w", id, job.Status, statuses, ctx.Err())
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}

// Heartbeat extends the lease of an asynchronous step (one whose webhook answered 202)
// and answers until when it holds. A token that is no longer current fails with a
// [ProblemLeaseLost] problem.
func (c *Client) Heartbeat(ctx context.Context, id int64, token string) (time.Time, error) {
	r, err := c.HeartbeatStepWithBodyWithResponse(ctx, id, "application/json", tokenBody(token, nil))
	if err != nil {
		return time.Time{}, err
	}
	res, err := answer(nil, r.HTTPResponse, r.Body, r.JSON200)
	if err != nil {
		return time.Time{}, err
	}
	return res.LeaseExpiresAt, nil
}

// CompleteStep reports the outcome of an asynchronous step: one of the answers a webhook
// gives (the webhook package's Response), fenced by the step's lease token.
func (c *Client) CompleteStep(ctx context.Context, id int64, token string, outcome webhook.Response) (*OutcomeApplied, error) {
	r, err := c.CompleteStepWithBodyWithResponse(ctx, id, "application/json", tokenBody(token, &outcome))
	if err != nil {
		return nil, err
	}
	return answer(nil, r.HTTPResponse, r.Body, r.JSON200)
}

// tokenBody encodes {"token": token} merged with the fields of outcome (when not nil).
func tokenBody(token string, outcome *webhook.Response) *bytes.Reader {
	fields := map[string]any{}
	if outcome != nil {
		b, _ := json.Marshal(outcome) // webhook.Response always marshals
		_ = json.Unmarshal(b, &fields)
	}
	fields["token"] = token
	b, _ := json.Marshal(fields)
	return bytes.NewReader(b)
}
