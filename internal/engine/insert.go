package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
)

// MaxBatch is the most jobs one batch insert takes.
const MaxBatch = 10000

// NewJob is a job a client asks to insert.
type NewJob struct {
	Handler        string
	Queue          string // default "default"
	Input          json.RawMessage
	Key            *string
	Priority       *int // 0-9, lower first, default 5
	RunAt          *time.Time
	Delay          *time.Duration
	ConcurrencyKey *string
	RateLimit      *RateLimitRef
	// RateLimits names several token buckets: a step runs only when each holds its
	// weight, and takes from all of them at once (at most MaxRateLimits, each bucket
	// once; not with RateLimit, its one-bucket form).
	RateLimits  []RateLimitRef
	MaxAttempts *int
	// IdempotencyKey makes a repeat within the engine's IdempotencyWindow answer the job
	// the key first made (Deduplicated), even after it finished.
	IdempotencyKey *string
	// Debounce collapses inserts of one key, while its job is pending, into that job
	// (Debounced); not with Key, IdempotencyKey, RunAt or Delay.
	Debounce *Debounce
	// TraceContext is the job's W3C trace context (TraceContextOf: a traceparent, then a
	// space and the tracestate; nil: none). Its steps' webhook calls continue that trace.
	TraceContext *string
	// FairnessKey is whose work the job is (a tenant): in a fair queue the keys with
	// runnable work take turns (docs/fairness.md). nil: none ('' in a fair queue).
	FairnessKey *string
}

// Debounce says how an insert collapses into the pending job of its key: that job runs
// once Period has passed with no new insert of the key, or at the latest MaxWait (0: no
// bound) after the insert that made it, with the latest insert's input. The key is
// global, like Key: put the handler in it to keep handlers apart.
type Debounce struct {
	Key     string
	Period  time.Duration
	MaxWait time.Duration
}

// RateLimitRef names the token bucket a job draws from.
type RateLimitRef struct {
	Name   string
	Key    string
	Weight int
}

// MaxRateLimits is the most rate limits one job may name.
const MaxRateLimits = 8

// DefaultQueue is the queue of a job that names none.
const DefaultQueue = "default"

// toInsert validates one job (its fields named as v names those of its item) and converts it.
func (j NewJob) toInsert(v *validator) pg.JobInsert {
	in := pg.JobInsert{Handler: j.Handler, Queue: j.Queue, Input: j.Input, Key: j.Key,
		ConcurrencyKey: j.ConcurrencyKey, MaxAttempts: j.MaxAttempts, RunAt: j.RunAt, IdempotencyKey: j.IdempotencyKey,
		TraceContext: j.TraceContext, FairnessKey: j.FairnessKey}
	if j.TraceContext != nil {
		if parent, _ := SplitTraceContext(*j.TraceContext); !ValidTraceparent(parent) {
			v.add("traceparent", "must be a W3C traceparent such as 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		}
	}
	if in.Queue == "" {
		in.Queue = DefaultQueue
	}
	v.name("handler", j.Handler)
	v.name("queue", in.Queue)
	v.keyText("key", j.Key)
	v.keyText("concurrency_key", j.ConcurrencyKey)
	v.keyText("idempotency_key", j.IdempotencyKey)
	if j.FairnessKey != nil && len(*j.FairnessKey) > 512 {
		v.add("fairness_key", "must be at most 512 bytes")
	}
	if j.Priority != nil {
		if *j.Priority < 0 || *j.Priority > 9 {
			v.add("priority", "must be between 0 (most urgent) and 9, got %d", *j.Priority)
		}
		in.Priority = j.Priority
	}
	if j.MaxAttempts != nil && (*j.MaxAttempts < 1 || *j.MaxAttempts > 1000) {
		v.add("max_attempts", "must be between 1 and 1000, got %d", *j.MaxAttempts)
	}
	if j.RunAt != nil && j.Delay != nil {
		v.add("delay", "give run_at or delay, not both")
	}
	if j.Delay != nil {
		if *j.Delay < 0 {
			v.add("delay", "must not be negative")
		}
		ms := j.Delay.Milliseconds()
		in.DelayMS = &ms
	}
	v.jsonValue("input/", j.Input)
	if d := j.Debounce; d != nil {
		v.keyText("debounce/key", &d.Key)
		if d.Period <= 0 {
			v.add("debounce/period", "must be positive")
		}
		if d.MaxWait < 0 {
			v.add("debounce/max_wait", "must be positive")
		}
		switch {
		case j.Key != nil:
			v.add("debounce", "give key or debounce, not both")
		case j.IdempotencyKey != nil:
			v.add("debounce", "give an idempotency key or debounce, not both")
		case j.RunAt != nil || j.Delay != nil:
			v.add("debounce", "a debounced job runs once its period has passed: give no run_at or delay")
		}
		in.Debounce = &pg.Debounce{Key: d.Key, Period: d.Period, MaxWait: d.MaxWait}
	}
	limits, field := j.RateLimits, "rate_limits/"
	if j.RateLimit != nil {
		if j.RateLimits != nil {
			v.add("rate_limits", "give rate_limit or rate_limits, not both")
		}
		limits, field = []RateLimitRef{*j.RateLimit}, "rate_limit"
	}
	if len(limits) > MaxRateLimits {
		v.add("rate_limits", "names %d rate limits, more than the %d a job may name", len(limits), MaxRateLimits)
	}
	seen := map[RateLimitRef]bool{}
	for i, l := range limits {
		f := field
		if j.RateLimit == nil {
			f = field + strconv.Itoa(i)
		}
		v.name(f+"/name", l.Name)
		if msg := UnstorableText(l.Key); msg != "" {
			v.add(f+"/key", "%s", msg)
		}
		if l.Weight == 0 {
			l.Weight = 1
		}
		if l.Weight < 1 {
			v.add(f+"/weight", "must be at least 1")
		}
		if bucket := (RateLimitRef{Name: l.Name, Key: l.Key}); seen[bucket] {
			v.add(f, "names the bucket of rate limit %q and key %q twice", l.Name, l.Key)
		} else {
			seen[bucket] = true
		}
		if i == 0 {
			in.RateLimit, in.RateKey, in.RateWeight = &l.Name, &l.Key, &l.Weight
		} else {
			in.ExtraRateLimits = append(in.ExtraRateLimits, pg.RateLimitUse(l))
		}
	}
	return in
}

// InsertJobs validates and inserts jobs in one statement, answering in request order.
// A job whose key a live job holds answers that job (Deduplicated). Any invalid job or
// unknown handler refuses the whole batch with a *ValidationError; nothing is written.
func (e *Engine) InsertJobs(ctx context.Context, jobs []NewJob) ([]JobInserted, error) {
	out := make([]JobInserted, 0, len(jobs))
	err := e.InsertJobsEach(ctx, jobs, func(j *JobInserted) { out = append(out, *j) })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// InsertJobsEach is InsertJobs answering each job to each, in request order, once the
// batch is written; j is valid only during the call. A caller that encodes the answers
// at once (the batch endpoint) holds no slice of 10 000 jobs: at 5 000 jobs it was
// 1.9 MB a request for the collector to scan.
func (e *Engine) InsertJobsEach(ctx context.Context, jobs []NewJob, each func(j *JobInserted)) error {
	rows, err := e.insertJobs(ctx, jobs, true)
	if err != nil {
		return err
	}
	var j JobInserted
	for i := range rows {
		r := &rows[i]
		j = JobInserted{Job: jobOf(r.Job), Deduplicated: r.Deduplicated, Debounced: r.Debounced}
		each(&j)
	}
	return nil
}

func (e *Engine) insertJobs(ctx context.Context, jobs []NewJob, batch bool) ([]pg.JobInserted, error) {
	v := &validator{}
	if len(jobs) == 0 {
		v.add("jobs", "must hold at least one job")
	}
	if len(jobs) > MaxBatch {
		v.add("jobs", "holds %d jobs, more than the %d a batch may hold", len(jobs), MaxBatch)
	}
	if err := v.err(); err != nil {
		return nil, err
	}
	items := make([]pg.JobInsert, len(jobs))
	if batch {
		v.within = "jobs/"
	}
	for i := range jobs {
		v.index = i
		items[i] = jobs[i].toInsert(v)
	}
	v.within = ""
	if err := v.err(); err != nil {
		return nil, err
	}
	opts := pg.JobInsertOptions{IdempotencyWindow: e.cfg.IdempotencyWindow}
	if e.localClaims.Load() != nil {
		counts := map[string]int{}
		for i := range items {
			counts[items[i].Queue]++
		}
		opts.Claimer = e.claimerOf(counts)
	}
	if e.cfg.IdempotencyClock != nil {
		opts.AsOf = ptr(e.cfg.IdempotencyClock())
	}
	out, err := e.db.JobInsertManyWith(ctx, items, opts)
	var refused *pg.InsertRefusedError
	if err != nil && !errors.As(err, &refused) {
		// JobInsertMany explains a refusal only when the statement answered no row at all;
		// a batch that also holds a live job's key answers that job, and the refusal
		// surfaced as "fewer rows than requested". Nothing was written either way (one bad
		// item gates the whole insert), so look for the reason here, on this error path only.
		if problems := e.insertProblems(ctx, items); len(problems) > 0 {
			refused = &pg.InsertRefusedError{Problems: problems}
		}
	}
	if refused != nil {
		for _, p := range refused.Problems {
			prefix := ""
			if batch {
				prefix = fmt.Sprintf("jobs/%d/", p.Index)
			}
			// The database names a job's first limit rate_limit/…; given as a list, it is rate_limits/0/….
			if field, ok := strings.CutPrefix(p.Field, "rate_limit/"); ok && p.Index < len(jobs) && jobs[p.Index].RateLimit == nil {
				p.Field = "rate_limits/0/" + field
			}
			v.add(prefix+p.Field, "%s", p.Message)
		}
		return nil, v.err()
	}
	if err == nil && e.metrics != nil {
		for _, j := range out {
			switch {
			case j.Deduplicated:
				e.metrics.Deduplicated.Inc()
			case j.Debounced: // collapsed into a pending job: neither a new job nor a dedup
			default:
				e.metrics.JobsInserted.WithLabelValues(j.Queue).Inc()
			}
		}
	}
	return out, err
}

// InsertJob inserts one job (field errors name the field without a "jobs/N/" prefix).
func (e *Engine) InsertJob(ctx context.Context, job NewJob) (JobInserted, error) {
	out, err := e.insertJobs(ctx, []NewJob{job}, false)
	if err != nil {
		return JobInserted{}, err
	}
	return JobInserted{Job: jobOf(out[0].Job), Deduplicated: out[0].Deduplicated, Debounced: out[0].Debounced}, nil
}

// insertProblems finds the items of a refused batch that name an unknown handler or rate
// limit, or a weight the limit's burst can never hold: one lookup per distinct name.
func (e *Engine) insertProblems(ctx context.Context, items []pg.JobInsert) []pg.InsertProblem {
	handlers := map[string]bool{}
	limits := map[string]*pg.RateLimit{}
	var problems []pg.InsertProblem
	for i, it := range items {
		known, seen := handlers[it.Handler]
		if !seen {
			_, err := e.db.HandlerGet(ctx, it.Handler)
			if err != nil && !errors.Is(err, ErrNotFound) {
				return nil
			}
			known = err == nil
			handlers[it.Handler] = known
		}
		if !known {
			problems = append(problems, pg.InsertProblem{Index: i, Field: "handler",
				Message: fmt.Sprintf("no handler named %q is registered (PUT /v1/handlers/%s first)", it.Handler, it.Handler)})
		}
		if it.RateLimit == nil {
			continue
		}
		weight := 1
		if it.RateWeight != nil {
			weight = *it.RateWeight
		}
		uses := append([]pg.RateLimitUse{{Name: *it.RateLimit, Weight: weight}}, it.ExtraRateLimits...)
		for n, use := range uses {
			l, seen := limits[use.Name]
			if !seen {
				got, err := e.db.RateLimitGet(ctx, use.Name)
				if err != nil && !errors.Is(err, ErrNotFound) {
					return nil
				}
				if err == nil {
					l = &got
				}
				limits[use.Name] = l
			}
			field := "rate_limit"
			if n > 0 {
				field = "rate_limits/" + strconv.Itoa(n)
			}
			switch {
			case l == nil:
				problems = append(problems, pg.InsertProblem{Index: i, Field: field + "/name",
					Message: fmt.Sprintf("no rate limit named %q exists (PUT /v1/rate-limits/%s first)", use.Name, use.Name)})
			case l.Burst < float64(use.Weight):
				problems = append(problems, pg.InsertProblem{Index: i, Field: field + "/weight",
					Message: fmt.Sprintf("weight %d can never fit: rate limit %q has burst %g", use.Weight, use.Name, l.Burst)})
			}
		}
	}
	return problems
}
