package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
)

// GetHealth answers while the process is up.
func (s *Server) GetHealth(context.Context, GetHealthRequestObject) (GetHealthResponseObject, error) {
	return GetHealth200JSONResponse{Status: "ok"}, nil
}

// GetReady answers 200 once the database answers and every migration is applied.
func (s *Server) GetReady(ctx context.Context, _ GetReadyRequestObject) (GetReadyResponseObject, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	pending, err := s.eng.PendingMigrations(ctx)
	if err != nil {
		detail := "the database does not answer: " + err.Error()
		return GetReady503ApplicationProblemPlusJSONResponse{Type: problemType("not-ready"), Title: "Not ready",
			Status: http.StatusServiceUnavailable, Detail: &detail}, nil
	}
	if pending > 0 {
		detail := fmt.Sprintf("%d migrations are not applied yet", pending)
		return GetReady503ApplicationProblemPlusJSONResponse{Type: problemType("not-ready"), Title: "Not ready",
			Status: http.StatusServiceUnavailable, Detail: &detail}, nil
	}
	return GetReady200JSONResponse{Status: "ready", PendingMigrations: &pending}, nil
}

// maxDurationText is the longest duration a request may give: what a time.Duration
// holds (about 292 years). Longer ones are refused, not dropped.
const maxDurationText = "2562047h"

// durationSyntax is the schema's Duration pattern: a string that matches it and still
// does not parse is too long.
var durationSyntax = regexp.MustCompile(`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`)

// parseDuration reads a duration field; the schema's pattern checks only its syntax, so
// an overflow ("9999999999h") is caught here and named.
func parseDuration(field, s string, fields *[]engine.FieldError) (time.Duration, bool) {
	d, err := time.ParseDuration(s)
	if err != nil {
		msg := `must be a duration such as "500ms", "30s" or "1h30m"`
		if durationSyntax.MatchString(s) {
			msg = "is longer than the longest duration the server can hold (" + maxDurationText + ")"
		}
		*fields = append(*fields, engine.FieldError{Field: field, Message: msg})
		return 0, false
	}
	return d, true
}

// newJob translates a wire job into an engine job; fields gets what cannot be translated
// (named under prefix).
func newJob(in *JobInsert, prefix string, fields *[]engine.FieldError) engine.NewJob {
	j := engine.NewJob{Handler: in.Handler, Key: in.Key, Priority: in.Priority, RunAt: in.RunAt,
		ConcurrencyKey: in.ConcurrencyKey, MaxAttempts: in.MaxAttempts, IdempotencyKey: in.IdempotencyKey,
		FairnessKey: in.FairnessKey}
	if in.Queue != nil {
		j.Queue = *in.Queue
	}
	if in.Input != nil {
		j.Input = *in.Input
	}
	if in.Delay != nil {
		if d, ok := parseDuration(prefix+"delay", *in.Delay, fields); ok {
			j.Delay = &d
		}
	}
	if in.RateLimit != nil {
		r := rateLimitRef(*in.RateLimit)
		j.RateLimit = &r
	}
	if in.Debounce != nil {
		j.Debounce = &engine.Debounce{Key: in.Debounce.Key}
		if d, ok := parseDuration(prefix+"debounce/period", in.Debounce.Period, fields); ok {
			j.Debounce.Period = d
		}
		if in.Debounce.MaxWait != nil {
			if d, ok := parseDuration(prefix+"debounce/max_wait", *in.Debounce.MaxWait, fields); ok {
				j.Debounce.MaxWait = d
			}
		}
	}
	if in.RateLimits != nil {
		j.RateLimits = make([]engine.RateLimitRef, len(*in.RateLimits))
		for i, r := range *in.RateLimits {
			j.RateLimits[i] = rateLimitRef(r)
		}
	}
	return j
}

// rateLimitRef translates a wire rate limit reference (absent key: the shared bucket "",
// absent weight: 0, read as 1).
func rateLimitRef(in RateLimitRef) engine.RateLimitRef {
	r := engine.RateLimitRef{Name: in.Name}
	if in.Key != nil {
		r.Key = *in.Key
	}
	if in.Weight != nil {
		r.Weight = *in.Weight
	}
	return r
}

// InsertJob inserts one job: 201, or 200 with the live job holding its key.
func (s *Server) InsertJob(ctx context.Context, req InsertJobRequestObject) (InsertJobResponseObject, error) {
	var fields []engine.FieldError
	job := newJob(req.Body, "", &fields)
	if req.Params.IdempotencyKey != nil {
		job.IdempotencyKey = req.Params.IdempotencyKey
	}
	job.TraceContext = jobTraceContext(ctx, req.Params.Traceparent, req.Params.Tracestate)
	if len(fields) > 0 {
		return nil, &engine.ValidationError{Errors: fields}
	}
	got, err := s.eng.InsertJob(ctx, job)
	if err != nil {
		return nil, err
	}
	status := http.StatusCreated
	if got.Deduplicated || got.Debounced {
		status = http.StatusOK
	}
	return jsonResponse{status: status, body: jobInsertedBody{Job: jobBody(&got.Job), Deduplicated: got.Deduplicated,
		Debounced: got.Debounced}}, nil
}

// InsertJobs inserts a batch in one statement, answering in request order.
func (s *Server) InsertJobs(ctx context.Context, req InsertJobsRequestObject) (InsertJobsResponseObject, error) {
	jobs := make([]engine.NewJob, len(req.Body.Jobs))
	var fields []engine.FieldError
	tc := jobTraceContext(ctx, req.Params.Traceparent, req.Params.Tracestate)
	for i := range req.Body.Jobs {
		in := &req.Body.Jobs[i]
		prefix := "" // the field names of a duration that does not parse, built only for one
		if in.Delay != nil || in.Debounce != nil {
			prefix = "jobs/" + strconv.Itoa(i) + "/"
		}
		jobs[i] = newJob(in, prefix, &fields)
		jobs[i].TraceContext = tc
	}
	if len(fields) > 0 {
		return nil, &engine.ValidationError{Errors: fields}
	}
	answer := newInsertedEncoder(len(jobs))
	if err := s.eng.InsertJobsEach(ctx, jobs, answer.add); err != nil {
		answerBuffers.Put(answer.b)
		return nil, err
	}
	return answer.finish(), nil
}

func parseCursor(c *string) *int64 {
	if c == nil {
		return nil
	}
	n, err := strconv.ParseInt(*c, 10, 64)
	if err != nil {
		return nil
	}
	return &n
}

func jobPage(jobs []engine.Job, limit int) JobPage {
	page := JobPage{Jobs: make([]Job, len(jobs))}
	for i := range jobs {
		page.Jobs[i] = jobBody(&jobs[i])
	}
	if len(jobs) == limit && limit > 0 {
		c := strconv.FormatInt(jobs[len(jobs)-1].ID, 10)
		page.NextCursor = &c
	}
	return page
}

// ListJobs lists jobs newest first with keyset pagination.
func (s *Server) ListJobs(ctx context.Context, req ListJobsRequestObject) (ListJobsResponseObject, error) {
	p := req.Params
	limit := 50
	if p.Limit != nil {
		limit = *p.Limit
	}
	var status *string
	if p.Status != nil {
		st := string(*p.Status)
		status = &st
	}
	f := engine.JobFilter{Queue: p.Queue, Status: status, Handler: p.Handler, Key: p.Key,
		Schedule: p.Schedule, FairnessKey: p.FairnessKey, Before: parseCursor(p.Cursor), CreatedAfter: p.CreatedAfter,
		CreatedBefore: p.CreatedBefore, Limit: limit}
	if p.InputContains != nil {
		f.InputContains = json.RawMessage(*p.InputContains)
	}
	if p.ResultContains != nil {
		f.ResultContains = json.RawMessage(*p.ResultContains)
	}
	jobs, err := s.eng.ListJobs(ctx, f)
	if v := (*engine.ValidationError)(nil); errors.As(err, &v) {
		for i := range v.Errors { // the filters are query parameters
			v.Errors[i].Field = "query/" + v.Errors[i].Field
		}
	}
	if err != nil {
		return nil, err
	}
	return ListJobs200JSONResponse(jobPage(jobs, limit)), nil
}

// GetJob returns one job with its inbox and children counts.
func (s *Server) GetJob(ctx context.Context, req GetJobRequestObject) (GetJobResponseObject, error) {
	d, err := s.eng.GetJob(ctx, req.Id)
	if err != nil {
		return nil, notFound(err, "job", req.Id)
	}
	return jsonResponse{status: http.StatusOK, body: jobDetailBody{Job: jobBody(&d.Job), SignalsTotal: d.SignalsTotal,
		SignalsPending: d.SignalsPending, ChildrenTotal: d.ChildrenTotal, ChildrenFinished: d.ChildrenFinished}}, nil
}

func notFound(err error, what string, id int64) error {
	if err == engine.ErrNotFound {
		return fmt.Errorf("%w: no %s with id %d", engine.ErrNotFound, what, id)
	}
	return err
}

// ListJobSteps returns a job's attempt history.
func (s *Server) ListJobSteps(ctx context.Context, req ListJobStepsRequestObject) (ListJobStepsResponseObject, error) {
	limit := 200
	if req.Params.Limit != nil {
		limit = *req.Params.Limit
	}
	steps, err := s.eng.ListSteps(ctx, req.Id, limit)
	if err != nil {
		return nil, notFound(err, "job", req.Id)
	}
	out := StepPage{Steps: make([]Step, len(steps))}
	for i, st := range steps {
		out.Steps[i] = Step{Id: st.ID, Step: st.Step, Attempt: st.Attempt, Outcome: st.Outcome, HttpStatus: st.HTTPStatus,
			StartedAt: st.StartedAt, FinishedAt: st.FinishedAt, Error: st.Error,
			DurationMs: float32(st.FinishedAt.Sub(st.StartedAt).Microseconds()) / 1000, Bodies: stepBodiesBody(st.Bodies)}
		if out.Steps[i].Error == nil {
			out.Steps[i].Error = json.RawMessage("null")
		}
	}
	return ListJobSteps200JSONResponse(out), nil
}

// ListJobWaits answers when a job waited for a slot of its concurrency key or for its
// rate limit, derived from the history (engine.JobWaits).
func (s *Server) ListJobWaits(ctx context.Context, req ListJobWaitsRequestObject) (ListJobWaitsResponseObject, error) {
	w, err := s.eng.JobWaits(ctx, req.Id)
	if err != nil {
		return nil, notFound(err, "job", req.Id)
	}
	out := JobWaits{Waits: make([]JobWait, len(w.Waits)), Partial: w.Partial}
	for i, x := range w.Waits {
		out.Waits[i] = JobWait{Kind: JobWaitKind(x.Kind), Start: x.Start, End: x.End}
	}
	return ListJobWaits200JSONResponse(out), nil
}

// ListJobSignals returns a job's inbox.
func (s *Server) ListJobSignals(ctx context.Context, req ListJobSignalsRequestObject) (ListJobSignalsResponseObject, error) {
	limit := 200
	if req.Params.Limit != nil {
		limit = *req.Params.Limit
	}
	entries, err := s.eng.ListSignals(ctx, req.Id, limit)
	if err != nil {
		return nil, notFound(err, "job", req.Id)
	}
	out := SignalPage{Signals: make([]Signal, len(entries))}
	for i, e := range entries {
		out.Signals[i] = Signal{Id: e.ID, Seq: e.Seq, Name: e.Name, Payload: e.Payload, CreatedAt: e.CreatedAt, Consumed: e.Consumed}
		if out.Signals[i].Payload == nil {
			out.Signals[i].Payload = json.RawMessage("null")
		}
	}
	return ListJobSignals200JSONResponse(out), nil
}

// SendSignal delivers a signal to a job by id.
func (s *Server) SendSignal(ctx context.Context, req SendSignalRequestObject) (SendSignalResponseObject, error) {
	var payload json.RawMessage
	if req.Body.Payload != nil {
		payload = *req.Body.Payload
	}
	sent, err := s.eng.Signal(ctx, engine.SignalTarget{JobID: &req.Id,
		TraceContext: jobTraceContext(ctx, req.Params.Traceparent, req.Params.Tracestate)}, req.Body.Name, payload)
	if err != nil {
		return nil, notFound(err, "job", req.Id)
	}
	return SendSignal202JSONResponse{SignalId: sent.SignalID, JobId: sent.JobID, Woke: sent.Woke}, nil
}

// SendSignalByKey delivers a signal to the live job holding a key.
func (s *Server) SendSignalByKey(ctx context.Context, req SendSignalByKeyRequestObject) (SendSignalByKeyResponseObject, error) {
	var payload json.RawMessage
	if req.Body.Payload != nil {
		payload = *req.Body.Payload
	}
	sent, err := s.eng.Signal(ctx, engine.SignalTarget{Key: &req.Body.Key,
		TraceContext: jobTraceContext(ctx, req.Params.Traceparent, req.Params.Tracestate)}, req.Body.Name, payload)
	if err != nil {
		return nil, missing(err, "live job with the key", req.Body.Key)
	}
	return SendSignalByKey202JSONResponse{SignalId: sent.SignalID, JobId: sent.JobID, Woke: sent.Woke}, nil
}

// ListJobChildren lists a job's children.
func (s *Server) ListJobChildren(ctx context.Context, req ListJobChildrenRequestObject) (ListJobChildrenResponseObject, error) {
	limit := 50
	if req.Params.Limit != nil {
		limit = *req.Params.Limit
	}
	jobs, err := s.eng.Children(ctx, req.Id, parseCursor(req.Params.Cursor), limit)
	if err != nil {
		return nil, notFound(err, "job", req.Id)
	}
	return ListJobChildren200JSONResponse(jobPage(jobs, limit)), nil
}

// CancelJob cancels a live job and its live children.
func (s *Server) CancelJob(ctx context.Context, req CancelJobRequestObject) (CancelJobResponseObject, error) {
	if err := s.eng.Cancel(ctx, req.Id); err != nil {
		return nil, notFound(err, "job", req.Id)
	}
	d, err := s.eng.GetJob(ctx, req.Id)
	if err != nil {
		return nil, err
	}
	return CancelJob200JSONResponse(jobBody(&d.Job)), nil
}

// RetryJob makes a failed or cancelled job runnable again.
func (s *Server) RetryJob(ctx context.Context, req RetryJobRequestObject) (RetryJobResponseObject, error) {
	if err := s.eng.Retry(ctx, req.Id); err != nil {
		return nil, notFound(err, "job", req.Id)
	}
	d, err := s.eng.GetJob(ctx, req.Id)
	if err != nil {
		return nil, err
	}
	return RetryJob200JSONResponse(jobBody(&d.Job)), nil
}

// ReplayJob runs a finished job again, in place, from a chosen step (docs/protocol.md,
// "Replay and rerun").
func (s *Server) ReplayJob(ctx context.Context, req ReplayJobRequestObject) (ReplayJobResponseObject, error) {
	var state *json.RawMessage
	if req.Body.State != nil {
		state = (*json.RawMessage)(req.Body.State)
	}
	d, err := s.eng.Replay(ctx, req.Id, req.Body.FromStep, state)
	if err != nil {
		return nil, notFound(err, "job", req.Id)
	}
	return ReplayJob200JSONResponse(jobBody(&d.Job)), nil
}

// RerunJob runs a finished job again as a new job linked to it, with its input or an
// edited one.
func (s *Server) RerunJob(ctx context.Context, req RerunJobRequestObject) (RerunJobResponseObject, error) {
	var input json.RawMessage
	if req.Body.Input != nil {
		input = json.RawMessage(*req.Body.Input)
	}
	d, err := s.eng.Rerun(ctx, req.Id, input)
	if err != nil {
		return nil, notFound(err, "job", req.Id)
	}
	return RerunJob201JSONResponse(jobBody(&d.Job)), nil
}

// HeartbeatStep extends an asynchronous step's lease.
func (s *Server) HeartbeatStep(ctx context.Context, req HeartbeatStepRequestObject) (HeartbeatStepResponseObject, error) {
	ext, err := s.eng.Heartbeat(ctx, req.Id, req.Body.Token.String())
	if err != nil {
		return nil, err
	}
	return HeartbeatStep200JSONResponse{LeaseExpiresAt: ext.ExpiresAt}, nil
}

// CompleteStep applies an asynchronous step's outcome, fenced by its lease token.
func (s *Server) CompleteStep(ctx context.Context, req CompleteStepRequestObject) (CompleteStepResponseObject, error) {
	b := req.Body
	raw, err := json.Marshal(StepAnswer{Next: b.Next, Await: b.Await, Spawn: b.Spawn, Done: b.Done, Fail: b.Fail, Retry: b.Retry})
	if err != nil {
		return nil, err
	}
	outcome, err := engine.DecodeResponse(raw)
	if err != nil {
		if verr, ok := err.(*engine.ValidationError); ok {
			return nil, verr
		}
		return nil, &engine.ValidationError{Errors: []engine.FieldError{{Field: "body", Message: err.Error()}}}
	}
	// The handler answered this step's webhook 202 (that is what makes a step asynchronous):
	// the history row records that status rather than none.
	accepted := http.StatusAccepted
	outcome.HTTPStatus = &accepted
	// The history keeps the outcome posted (raw: without its token) as the attempt's answer
	// when the job's queue keeps bodies for it; there is no request body to keep.
	outcome.Bodies = s.eng.StepBodies(nil, raw, true)
	applied, err := s.eng.ApplyOutcome(ctx, engine.StepOutcome{JobID: req.Id, Token: req.Body.Token.String(),
		BodiesByQueue: true, Outcome: outcome})
	if err != nil {
		return nil, err
	}
	return CompleteStep200JSONResponse{JobId: applied.ID, Status: JobStatus(applied.Status)}, nil
}

// ListHandlers lists every registered handler.
func (s *Server) ListHandlers(ctx context.Context, _ ListHandlersRequestObject) (ListHandlersResponseObject, error) {
	hs, err := s.eng.ListHandlers(ctx)
	if err != nil {
		return nil, err
	}
	out := HandlerList{Handlers: make([]HandlerConfig, len(hs))}
	for i, h := range hs {
		out.Handlers[i] = handlerBody(h, scopeOf(ctx))
	}
	return ListHandlers200JSONResponse(out), nil
}

// GetHandler returns one handler.
func (s *Server) GetHandler(ctx context.Context, req GetHandlerRequestObject) (GetHandlerResponseObject, error) {
	h, err := s.eng.GetHandler(ctx, req.Name)
	if err != nil {
		return nil, missing(err, "handler", req.Name)
	}
	return GetHandler200JSONResponse(handlerBody(h, scopeOf(ctx))), nil
}

// PutHandler registers or changes a handler; the engine vets its URL with the guard.
func (s *Server) PutHandler(ctx context.Context, req PutHandlerRequestObject) (PutHandlerResponseObject, error) {
	b := req.Body
	var fields []engine.FieldError
	set := engine.HandlerSettings{URL: b.Url, Secret: b.Secret, MaxAttempts: b.MaxAttempts,
		Timeout: optDuration("timeout", b.Timeout, &fields), BackoffBase: optDuration("backoff_base", b.BackoffBase, &fields),
		BackoffMax: optDuration("backoff_max", b.BackoffMax, &fields)}
	if br := b.Breaker; br != nil {
		set.Breaker = engine.BreakerSettings{Threshold: br.Threshold,
			ProbeInterval:    optDuration("breaker/probe_interval", br.ProbeInterval, &fields),
			ProbeIntervalMax: optDuration("breaker/probe_interval_max", br.ProbeIntervalMax, &fields),
			PauseAfter:       optDuration("breaker/pause_after", br.PauseAfter, &fields)}
	}
	if len(fields) > 0 {
		// Report what the engine would refuse too, each field in the body's order.
		fields = append(engine.CheckHandler(ctx, req.Name, set, s.cfg.Guard), fields...)
		slices.SortStableFunc(fields, func(a, b engine.FieldError) int {
			return slices.Index(handlerFields, a.Field) - slices.Index(handlerFields, b.Field)
		})
		return nil, &engine.ValidationError{Errors: fields}
	}
	h, err := s.eng.SetHandler(ctx, req.Name, set, s.cfg.Guard)
	if err != nil {
		return nil, err
	}
	return PutHandler200JSONResponse(handlerBody(h, scopeOf(ctx))), nil
}

// handlerFields orders a handler's field errors.
var handlerFields = []string{"name", "url", "secret", "max_attempts", "timeout", "backoff_base", "backoff_max",
	"breaker/threshold", "breaker/probe_interval", "breaker/probe_interval_max", "breaker/pause_after"}

// optDuration reads an optional duration field (nil when absent or unreadable; fields
// gets why it is unreadable).
func optDuration(field string, s *string, fields *[]engine.FieldError) *time.Duration {
	if s == nil {
		return nil
	}
	d, ok := parseDuration(field, *s, fields)
	if !ok {
		return nil
	}
	return &d
}

// ResumeHandler closes a handler's circuit breaker and lifts the pause it caused.
func (s *Server) ResumeHandler(ctx context.Context, req ResumeHandlerRequestObject) (ResumeHandlerResponseObject, error) {
	h, err := s.eng.ResumeHandler(ctx, req.Name)
	if err != nil {
		return nil, missing(err, "handler", req.Name)
	}
	return ResumeHandler200JSONResponse(handlerBody(h, scopeOf(ctx))), nil
}

// DeleteHandler removes a handler.
func (s *Server) DeleteHandler(ctx context.Context, req DeleteHandlerRequestObject) (DeleteHandlerResponseObject, error) {
	if err := s.eng.DeleteHandler(ctx, req.Name); err != nil {
		return nil, missing(err, "handler", req.Name)
	}
	return DeleteHandler204Response{}, nil
}

// ListQueues lists every queue with its counts.
func (s *Server) ListQueues(ctx context.Context, _ ListQueuesRequestObject) (ListQueuesResponseObject, error) {
	qs, err := s.eng.ListQueues(ctx)
	if err != nil {
		return nil, err
	}
	out := QueueList{Queues: make([]Queue, len(qs))}
	for i, q := range qs {
		out.Queues[i] = queueBody(q)
	}
	return ListQueues200JSONResponse(out), nil
}

// GetQueue returns one queue with its counts.
func (s *Server) GetQueue(ctx context.Context, req GetQueueRequestObject) (GetQueueResponseObject, error) {
	q, err := s.eng.GetQueue(ctx, req.Name)
	if err != nil {
		return nil, missing(err, "queue", req.Name)
	}
	return GetQueue200JSONResponse(queueBody(q)), nil
}

// PutQueue creates a queue or changes its settings.
func (s *Server) PutQueue(ctx context.Context, req PutQueueRequestObject) (PutQueueResponseObject, error) {
	set := engine.QueueSettings{Paused: req.Body.Paused, MaxInFlight: req.Body.MaxInFlight, Batch: req.Body.Batch}
	if req.Body.StepBodies != nil {
		set.StepBodies = (*string)(req.Body.StepBodies)
	}
	if req.Body.Fairness != nil {
		set.Fairness = (*string)(req.Body.Fairness)
	}
	if req.Body.Retention != nil {
		var fields []engine.FieldError
		if set.Retention = optDuration("retention", req.Body.Retention, &fields); len(fields) > 0 {
			return nil, &engine.ValidationError{Errors: fields}
		}
	}
	if preferMinimal(req.Params.Prefer) {
		if err := s.eng.SetQueueWithoutCounts(ctx, req.Name, set); err != nil {
			return nil, err
		}
		applied := "return=minimal"
		return PutQueue204Response{Headers: PutQueue204ResponseHeaders{PreferenceApplied: &applied}}, nil
	}
	q, err := s.eng.SetQueue(ctx, req.Name, set)
	if err != nil {
		return nil, err
	}
	return PutQueue200JSONResponse(queueBody(q)), nil
}

// preferMinimal reports whether a Prefer header (RFC 7240: comma-separated preferences,
// each a token, an optional =value, token or quoted, and optional ;parameters) asks for
// return=minimal.
func preferMinimal(p *Prefer) bool {
	if p == nil {
		return false
	}
	for _, pref := range strings.Split(string(*p), ",") {
		pref, _, _ = strings.Cut(pref, ";")
		name, value, _ := strings.Cut(strings.TrimSpace(pref), "=")
		if strings.EqualFold(strings.TrimSpace(name), "return") &&
			strings.EqualFold(strings.Trim(strings.TrimSpace(value), `"`), "minimal") {
			return true
		}
	}
	return false
}

// GetQueueThroughput returns a queue's finished steps per minute.
func (s *Server) GetQueueThroughput(ctx context.Context, req GetQueueThroughputRequestObject) (GetQueueThroughputResponseObject, error) {
	minutes := 60
	if req.Params.Minutes != nil {
		minutes = *req.Params.Minutes
	}
	points, err := s.eng.QueueThroughput(ctx, req.Name, minutes)
	if err != nil {
		return nil, err
	}
	out := Throughput{Points: make([]struct {
		Done   int64     `json:"done"`
		Failed int64     `json:"failed"`
		Minute time.Time `json:"minute"`
		Total  int64     `json:"total"`
	}, len(points))}
	for i, p := range points {
		out.Points[i].Done, out.Points[i].Failed, out.Points[i].Minute, out.Points[i].Total = p.Done, p.Failed, p.Minute, p.Total
	}
	return GetQueueThroughput200JSONResponse(out), nil
}
