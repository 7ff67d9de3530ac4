package engine

import (
	"context"
	"encoding/json"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
)

// Job is a job as the engine shows it to clients (the lease token is never shown).
type Job struct {
	ID       int64
	Queue    string
	Handler  string
	Status   string
	Priority int
	// EligibleAt is when a runnable job may run, or an awaiting job's deadline; nil for
	// an await without a deadline.
	EligibleAt     *time.Time
	Input          json.RawMessage
	State          json.RawMessage
	Result         json.RawMessage
	Error          json.RawMessage
	Step           int
	Attempt        int
	MaxAttempts    int
	Key            *string
	ConcurrencyKey *string
	RateLimit      *string // the rate limit's name (nil: none)
	RateKey        *string
	RateWeight     int
	// RateLimits are every rate limit the job draws from, the first being RateLimit,
	// RateKey and RateWeight (nil: none).
	RateLimits      []RateLimitRef
	ParentID        *int64
	PendingChildren int
	Awaiting        []string
	Wake            *string
	LeaseExpiresAt  *time.Time
	LeaseOwner      *string
	AttemptedAt     *time.Time
	CancelRequested bool
	CreatedAt       time.Time
	UpdatedAt       time.Time
	FinishedAt      *time.Time
	// ScheduleName and ScheduleTick name the schedule and tick that made the job (nil:
	// a client inserted it).
	ScheduleName *string
	ScheduleTick *time.Time
	// DebounceKey is the debounce key the job was inserted with (nil: none).
	DebounceKey *string
	// TraceContext is the job's W3C trace context (TraceContextOf; nil: none).
	TraceContext *string
	// RerunOf is the job this one reran (Rerun); nil otherwise.
	RerunOf *int64
	// FairnessKey is whose work the job is in a fair queue (nil: none).
	FairnessKey *string
}

func jobOf(j pg.Job) Job {
	return Job{RateLimits: rateLimitsOf(j), ID: j.ID, Queue: j.Queue, Handler: j.Handler, Status: j.Status, Priority: j.Priority,
		EligibleAt: j.EligibleAt, Input: j.Input, State: j.State, Result: j.Result, Error: j.Error,
		Step: j.Step, Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, Key: j.Key, ConcurrencyKey: j.ConcurrencyKey,
		RateLimit: j.RateLimit, RateKey: j.RateKey, RateWeight: j.RateWeight, ParentID: j.ParentID,
		PendingChildren: j.PendingChildren, Awaiting: j.Awaiting, Wake: j.Wake, LeaseExpiresAt: j.LeaseExpiresAt,
		LeaseOwner: j.LeaseOwner, AttemptedAt: j.AttemptedAt, CancelRequested: j.CancelRequested,
		CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, FinishedAt: j.FinishedAt,
		ScheduleName: j.ScheduleName, ScheduleTick: j.ScheduleTick, DebounceKey: j.DebounceKey,
		TraceContext: j.TraceContext, RerunOf: j.RerunOf, FairnessKey: j.FairnessKey}
}

// rateLimitsOf lists every rate limit of j, first the one of its rate_limit columns.
func rateLimitsOf(j pg.Job) []RateLimitRef {
	if j.RateLimit == nil {
		return nil
	}
	out := make([]RateLimitRef, 0, 1+len(j.ExtraRateLimits))
	out = append(out, RateLimitRef{Name: *j.RateLimit, Weight: j.RateWeight})
	if j.RateKey != nil {
		out[0].Key = *j.RateKey
	}
	for _, l := range j.ExtraRateLimits {
		out = append(out, RateLimitRef(l))
	}
	return out
}

func jobsOf(rows []pg.Job) []Job {
	out := make([]Job, len(rows))
	for i, j := range rows {
		out[i] = jobOf(j)
	}
	return out
}

// JobInserted is the answer for one inserted job: the new job, or the live job that
// already held its key (Deduplicated), or the pending job its debounced insert collapsed
// into (Debounced).
type JobInserted struct {
	Job
	Deduplicated bool
	Debounced    bool
}

// JobDetail is a job with its inbox and children counts.
type JobDetail struct {
	Job
	SignalsTotal     int64 // signals ever delivered
	SignalsPending   int64 // delivered and not yet shown to a step that consumed them
	ChildrenTotal    int
	ChildrenFinished int
}

// JobFilter selects the jobs ListJobs answers; nil fields do not filter. Before is the
// keyset cursor (ids below it); Limit is the page size.
type JobFilter struct {
	Queue, Status, Handler, Key *string
	Schedule                    *string // the jobs the schedule of this name made
	FairnessKey                 *string // the jobs of this fairness key ("" is the default key)
	Before                      *int64
	// CreatedAfter (inclusive) and CreatedBefore (exclusive, default now) are the time
	// window; a search by payload needs one of at most MaxSearchWindow.
	CreatedAfter, CreatedBefore *time.Time
	// InputContains and ResultContains keep the jobs whose input or result contains
	// them (JSON containment, as jsonb @>: an object matches a superset of its members).
	InputContains, ResultContains json.RawMessage
	Limit                         int
}

// MaxSearchWindow is the widest time window a search by payload may cover: the search
// reads the jobs created in it (docs/performance.md, "Search by payload").
const MaxSearchWindow = 7 * 24 * time.Hour

// searchSlack widens the ids a window is turned into: an inserting transaction open
// longer than this (gendurable_enqueue in a long transaction) may draw its id after a
// job created later, and fall outside the window's ids.
const searchSlack = 5 * time.Minute

// ListJobs lists jobs newest first (one statement, keyset on id). A time window is turned
// into ids first (a binary search of the primary key, about 20 probes a bound at a
// million jobs), so a search by payload reads the window's jobs, not the table.
func (e *Engine) ListJobs(ctx context.Context, f JobFilter) ([]Job, error) {
	v := &validator{}
	search := f.InputContains != nil || f.ResultContains != nil
	for field, c := range map[string]json.RawMessage{"input_contains": f.InputContains, "result_contains": f.ResultContains} {
		if c != nil && !json.Valid(c) {
			v.add(field, "must be JSON (an object or array the input or result contains), got %q", c)
		}
	}
	if search && f.CreatedAfter == nil {
		v.add("created_after", "is required with input_contains or result_contains: a search reads the jobs of a time window of at most %s", MaxSearchWindow)
	}
	if f.CreatedAfter != nil && f.CreatedBefore != nil && !f.CreatedBefore.After(*f.CreatedAfter) {
		v.add("created_before", "must be after created_after")
	}
	if search && f.CreatedAfter != nil {
		end := time.Now()
		if f.CreatedBefore != nil {
			end = *f.CreatedBefore
		}
		if end.Sub(*f.CreatedAfter) > MaxSearchWindow {
			v.add("created_after", "the window from created_after to created_before (or now) is %s, more than the %s a search may read",
				end.Sub(*f.CreatedAfter).Round(time.Second), MaxSearchWindow)
		}
	}
	if err := v.err(); err != nil {
		return nil, err
	}
	p := pg.JobListParams{Queue: f.Queue, Status: f.Status, Handler: f.Handler, Key: f.Key, Schedule: f.Schedule,
		FairnessKey: f.FairnessKey, Before: f.Before, CreatedAfter: f.CreatedAfter, CreatedBefore: f.CreatedBefore,
		InputContains: f.InputContains, ResultContains: f.ResultContains, Limit: f.Limit}
	if f.CreatedAfter != nil {
		id, err := e.db.JobIDAt(ctx, f.CreatedAfter.Add(-searchSlack))
		if err != nil {
			return nil, err
		}
		p.MinID = &id
	}
	if f.CreatedBefore != nil {
		id, err := e.db.JobIDAt(ctx, f.CreatedBefore.Add(searchSlack))
		if err != nil {
			return nil, err
		}
		if p.Before == nil || id < *p.Before {
			p.Before = &id
		}
	}
	rows, err := e.db.JobList(ctx, p)
	if err != nil {
		return nil, err
	}
	return jobsOf(rows), nil
}

// GetJob returns one job with its counts; ErrNotFound when there is none.
func (e *Engine) GetJob(ctx context.Context, id int64) (JobDetail, error) {
	d, err := e.db.JobGet(ctx, id)
	if err != nil {
		return JobDetail{}, err
	}
	return JobDetail{Job: jobOf(d.Job), SignalsTotal: d.InboxSeq, SignalsPending: d.InboxSeq - d.ConsumedSeq,
		ChildrenTotal: d.ChildrenTotal, ChildrenFinished: d.ChildrenFinished}, nil
}

// StepAttempt is one attempt of a job's step, from the steps history.
type StepAttempt struct {
	ID         int64
	Step       int
	Attempt    int
	Outcome    string // "next", "done", "error", "timeout", "http_500"…
	HTTPStatus *int
	StartedAt  time.Time
	FinishedAt time.Time
	Error      json.RawMessage
	// Bodies is the attempt's request and response bodies (nil: its queue's step_bodies
	// setting did not keep them).
	Bodies *StepBodies
}

// ListSteps returns at most limit attempts of a job's history, oldest first;
// ErrNotFound when there is no such job. It costs two statements.
func (e *Engine) ListSteps(ctx context.Context, jobID int64, limit int) ([]StepAttempt, error) {
	if _, err := e.db.JobGet(ctx, jobID); err != nil {
		return nil, err
	}
	rows, err := e.db.StepList(ctx, jobID, limit)
	if err != nil {
		return nil, err
	}
	out := make([]StepAttempt, len(rows))
	for i, s := range rows {
		out[i] = StepAttempt{ID: s.ID, Step: s.Step, Attempt: s.Attempt, Outcome: s.Outcome, HTTPStatus: s.HTTPStatus,
			StartedAt: s.StartedAt, FinishedAt: s.FinishedAt, Error: s.Error, Bodies: s.Bodies}
	}
	return out, nil
}

// InboxEntry is one signal of a job's inbox.
type InboxEntry struct {
	ID        int64
	Seq       int64
	Name      string
	Payload   json.RawMessage
	CreatedAt time.Time
	Consumed  bool // a step that consumed its signals has seen it
}

// ListSignals returns at most limit signals of a job's inbox, oldest first;
// ErrNotFound when there is no such job. It costs two statements.
func (e *Engine) ListSignals(ctx context.Context, jobID int64, limit int) ([]InboxEntry, error) {
	if _, err := e.db.JobGet(ctx, jobID); err != nil {
		return nil, err
	}
	rows, err := e.db.SignalList(ctx, jobID, limit)
	if err != nil {
		return nil, err
	}
	out := make([]InboxEntry, len(rows))
	for i, s := range rows {
		out[i] = InboxEntry{ID: s.ID, Seq: s.Seq, Name: s.Name, Payload: s.Payload, CreatedAt: s.CreatedAt, Consumed: s.Consumed}
	}
	return out, nil
}
