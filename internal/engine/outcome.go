package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/webhook"
)

// Outcome is what a step's answer asks for, decoded and validated, ready to be written.
type Outcome struct {
	// Kind is one of pg.KindNext, KindAwait, KindSpawn, KindDone, KindFail, KindRetry.
	Kind string
	// Label is what the steps history records: the answer ("next", "done"…) or the
	// failure ("error", "timeout", "http_500"…).
	Label      string
	State      json.RawMessage
	Result     json.RawMessage
	Error      json.RawMessage
	Delay      *time.Duration
	Timeout    *time.Duration
	Awaiting   []string
	Children   []pg.JobInsert
	HTTPStatus *int
	// Bodies is what the history row keeps of the attempt's request and answer (nil:
	// nothing, what the happy path of the default step_bodies setting writes).
	Bodies *StepBodies
}

// DecodeResponse reads a handler's answer (the body of a 200, or the outcome posted for
// an asynchronous step). Exactly one of next, await, spawn, done, fail, retry must be
// given; unknown fields are refused so that a typo is reported instead of ignored.
func DecodeResponse(body []byte) (Outcome, error) {
	r, ok := decodePlainResponse(body)
	if !ok {
		var err error
		if r, err = decodeResponseJSON(body); err != nil {
			return Outcome{}, err
		}
	}
	return FromResponse(r)
}

// decodeResponseJSON decodes an answer with encoding/json, unknown fields refused. Not
// inlined: its decoder would take a frame's worth of DecodeResponse's stack.
//
//go:noinline
func decodeResponseJSON(body []byte) (webhook.Response, error) {
	var r webhook.Response
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return r, fmt.Errorf("the answer is not a valid step response: %v", err)
	}
	// dec.More is false before a stray '}' or ']': ask for the next token instead.
	if _, err := dec.Token(); err != io.EOF {
		return r, fmt.Errorf("the answer has data after the JSON object")
	}
	return r, nil
}

// FromResponse validates a decoded answer, including that Postgres can store it (a
// \u0000 in a string, an unpaired surrogate escape, a NUL in a signal name are refused
// here, as a bad answer, rather than failing the statement that writes the batch).
//
// It fills in one Outcome rather than returning a literal per case: it runs on the
// step's goroutine, whose stack is small, and each literal took a slot of its frame.
func FromResponse(r webhook.Response) (Outcome, error) {
	var o Outcome
	err := fromResponse(r, &o)
	if err == nil {
		err = storable(&o)
	}
	if err != nil {
		return Outcome{}, err
	}
	return o, nil
}

// storable reports the first text of o that PostgreSQL cannot store.
//
//go:noinline
func storable(o *Outcome) error {
	var bad []FieldError
	for _, f := range []struct {
		name string
		doc  json.RawMessage
	}{{"state", o.State}, {"result", o.Result}, {"error", o.Error}} {
		if len(f.doc) > 0 {
			bad = append(bad, UnstorableJSON(f.doc, o.Kind+"/"+f.name+"/")...)
		}
	}
	for i, name := range o.Awaiting {
		if msg := UnstorableText(name); msg != "" {
			bad = append(bad, FieldError{Field: fmt.Sprintf("await/signals/%d", i), Message: msg})
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("the answer cannot be stored: %s %s", bad[0].Field, bad[0].Message)
	}
	return nil
}

func fromResponse(r webhook.Response, o *Outcome) error {
	set := 0
	for _, p := range []bool{r.Next != nil, r.Await != nil, r.Spawn != nil, r.Done != nil, r.Fail != nil, r.Retry != nil} {
		if p {
			set++
		}
	}
	if set != 1 {
		return fmt.Errorf("the answer must hold exactly one of next, await, spawn, done, fail, retry (it holds %d)", set)
	}
	switch {
	case r.Next != nil:
		o.Kind, o.Label, o.State = pg.KindNext, "next", jsonOrNil(r.Next.State)
		if r.Next.Delay > 0 {
			o.Delay = ptr(time.Duration(r.Next.Delay))
		}
	case r.Await != nil:
		o.Kind, o.Label, o.State = pg.KindAwait, "await", jsonOrNil(r.Await.State)
		if len(r.Await.Signals) > 0 {
			o.Awaiting = r.Await.Signals
		}
		if r.Await.Timeout > 0 {
			o.Timeout = ptr(time.Duration(r.Await.Timeout))
		}
	case r.Spawn != nil:
		return spawnOutcome(r.Spawn, o)
	case r.Done != nil:
		o.Kind, o.Label, o.Result = pg.KindDone, "done", jsonOrNil(r.Done.Result)
	case r.Fail != nil:
		o.Kind, o.Label, o.Error = pg.KindFail, "fail", jsonOrNil(r.Fail.Error)
		if o.Error == nil {
			o.Error = errorJSON("the handler failed the job", nil)
		}
	default:
		o.Kind, o.Label, o.Error = pg.KindRetry, "retry", jsonOrNil(r.Retry.Error)
		if o.Error == nil {
			o.Error = errorJSON("the handler asked for a retry", nil)
		}
		if r.Retry.Delay > 0 {
			o.Delay = ptr(time.Duration(r.Retry.Delay))
		}
	}
	return nil
}

//go:noinline
func spawnOutcome(s *webhook.Spawn, o *Outcome) error {
	if len(s.Children) > MaxBatch {
		return fmt.Errorf("spawn holds %d children, more than %d", len(s.Children), MaxBatch)
	}
	v := &validator{}
	children := make([]pg.JobInsert, len(s.Children))
	for i, c := range s.Children {
		nj := NewJob{Handler: c.Handler, Queue: c.Queue, Input: c.Input, Priority: c.Priority, MaxAttempts: c.MaxAttempts}
		if c.Key != "" {
			nj.Key = &c.Key
		}
		if c.ConcurrencyKey != "" {
			nj.ConcurrencyKey = &c.ConcurrencyKey
		}
		if c.FairnessKey != nil {
			nj.FairnessKey = c.FairnessKey
		}
		if c.Delay > 0 {
			nj.Delay = ptr(time.Duration(c.Delay))
		}
		v.within, v.index = "spawn/children/", i
		children[i] = nj.toInsert(v)
		v.within = ""
		if c.Queue == "" {
			children[i].Queue = "" // the parent's queue, filled in by the outcome statement
		}
	}
	if err := v.err(); err != nil {
		return err
	}
	o.Kind, o.Label, o.State, o.Children = pg.KindSpawn, "spawn", jsonOrNil(s.State), children
	return nil
}

// ErrorOutcome is a retryable failure of an attempt (transport error, bad status, bad
// answer): attempt+1 with backoff (or after retryAfter), failed once attempts run out.
func ErrorOutcome(label, message string, httpStatus *int, retryAfter *time.Duration, detail map[string]any) Outcome {
	return Outcome{Kind: pg.KindRetry, Label: label, Error: errorJSON(message, detail), HTTPStatus: httpStatus, Delay: retryAfter}
}

// FailOutcome ends the job as failed at once with message (a step that can never work).
func FailOutcome(label, message string, detail map[string]any) Outcome {
	return Outcome{Kind: pg.KindFail, Label: label, Error: errorJSON(message, detail)}
}

func errorJSON(message string, detail map[string]any) json.RawMessage {
	m := map[string]any{"message": message}
	for k, v := range detail {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return b
}

// jsonOrNil treats a missing value and JSON null alike: "not given".
func jsonOrNil(b json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(b)) == 0 || bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		return nil
	}
	return b
}

func ptr[T any](v T) *T { return &v }

// StepOutcome is an outcome for one leased step.
type StepOutcome struct {
	JobID int64
	Token string
	// NoGateSlot: the caller knows the step holds no gate slot (the dispatcher does, from
	// the claim); outcomes that all say so are written without the gate credit.
	NoGateSlot bool
	// Backoff is what a retry without its own delay computes its delay from (the
	// dispatcher has it from the claim: Step.WithOutcome). Nil (the asynchronous-step
	// API): ApplyOutcomes reads it, one statement for the batch, only when a retry
	// without a delay needs it.
	Backoff *RetryBackoff
	// BodiesByQueue: Bodies are kept only if the job's queue's step_bodies setting asks
	// for them (the outcome statement reads it: the asynchronous-step API). False: the
	// caller decided already (the dispatcher knows its queue's setting).
	BodiesByQueue bool
	// Attempt is the step's attempt as claimed (0: not known, the asynchronous-step
	// API); outcomes that know it can go by the plain outcome statement.
	Attempt int
	Outcome
}

// WithOutcome is o as the outcome of this step: fenced by its lease token, with the gate
// slot it holds and the backoff its retry takes, all known from the claim.
func (s *Step) WithOutcome(o Outcome) StepOutcome {
	return StepOutcome{JobID: s.ID, Token: s.LeaseToken, NoGateSlot: s.GateShard == nil, Attempt: s.Attempt,
		Backoff: ptr(backoffOf(s.Attempt, s.BackoffBaseMS, s.BackoffMaxMS)), Outcome: o}
}

func (s StepOutcome) record() (pg.OutcomeRecord, error) {
	r := pg.OutcomeRecord{ID: s.JobID, Token: s.Token, Kind: s.Kind, Label: s.Label, State: s.State,
		Result: s.Result, Error: s.Error, Awaiting: s.Awaiting, HTTPStatus: s.HTTPStatus, Bodies: s.Bodies,
		Attempt: s.Attempt}
	if s.BodiesByQueue && s.Bodies != nil {
		b := *s.Bodies
		b.ByQueue = true
		r.Bodies = &b
	}
	if s.Delay != nil {
		r.DelayMS = ptr(s.Delay.Milliseconds())
	}
	if s.Timeout != nil {
		r.TimeoutMS = ptr(s.Timeout.Milliseconds())
	}
	if s.Kind == pg.KindSpawn {
		b, err := json.Marshal(s.Children)
		if err != nil {
			return r, err
		}
		r.Children = b
	}
	return r, nil
}

// ApplyOutcomes writes a batch of outcomes with one statement and answers a result per
// outcome, in order: applied, refused for a stale lease token (nothing changed), or not
// written (Err: the statement failed; writing it again may succeed). It does not retry:
// the caller holds the one layer of retries (the dispatcher's completer, with backoff
// and its leases heartbeated meanwhile; ApplyOutcome for the API). An outcome the
// database refuses (a spawn whose child's key a live job holds, a value it cannot store)
// becomes a failed attempt of its step, with the reason, rather than failing its batch:
// alone, that is a second statement; in a batch, the batch is written again one outcome
// at a time (and a failure of another kind there leaves the rest unwritten).
func (e *Engine) ApplyOutcomes(ctx context.Context, outcomes []StepOutcome) []OutcomeResult {
	results := make([]OutcomeResult, len(outcomes))
	rows, err := e.applyOutcomes(ctx, outcomes)
	// On Citus a batch is a transaction per shard, and the shards written before one that
	// failed stay written: their outcomes are applied whatever comes next (on plain
	// PostgreSQL a failed statement answers no rows).
	matchResults(results, outcomes, rows)
	switch {
	case err == nil:
	case len(outcomes) == 1:
		if !results[0].Applied {
			results[0] = e.applyRefused(ctx, outcomes[0], err)
		}
	case errors.Is(err, ErrConflict) && hasSpawn(outcomes) || errors.Is(err, ErrInvalid):
		// One outcome the database refused must not fail the others of its batch.
		var failed error
		for i := range outcomes {
			if results[i].Applied {
				continue
			}
			if failed != nil {
				results[i].Err = failed
				continue
			}
			rows, err := e.applyOutcomes(ctx, outcomes[i:i+1])
			if err == nil {
				matchResults(results[i:i+1], outcomes[i:i+1], rows)
				continue
			}
			results[i] = e.applyRefused(ctx, outcomes[i], err)
			if _, refused := refusedOutcome(outcomes[i], err); !refused {
				failed = err
			}
		}
	default:
		for i := range results {
			if !results[i].Applied {
				results[i].Err = err
			}
		}
	}
	return results
}

// applyRefused writes the failed attempt that o becomes when the database refused it
// with err; any other err is o's result.
func (e *Engine) applyRefused(ctx context.Context, o StepOutcome, err error) OutcomeResult {
	instead, ok := refusedOutcome(o, err)
	if !ok {
		return OutcomeResult{Err: err}
	}
	rows, err := e.applyOutcomes(ctx, []StepOutcome{instead})
	if err != nil {
		return OutcomeResult{Err: err}
	}
	var r [1]OutcomeResult
	matchResults(r[:], []StepOutcome{instead}, rows)
	return r[0]
}

// matchResults fills in the result of each outcome that rows (the statement's answer)
// report applied, by job and lease token: a stale outcome of a job can share a batch
// with its current one.
func matchResults(results []OutcomeResult, outcomes []StepOutcome, rows []pg.OutcomeApplied) {
	set := func(i int, a *pg.OutcomeApplied) {
		results[i] = OutcomeResult{Applied: true,
			OutcomeApplied: OutcomeApplied{ID: a.ID, Token: a.Token, Status: a.Status, Queue: a.Queue, Ready: a.Ready}}
	}
	if len(outcomes) <= 8 { // a few: no map
		for k := range rows {
			for i, o := range outcomes {
				if o.JobID == rows[k].ID && o.Token == rows[k].Token {
					set(i, &rows[k])
					break
				}
			}
		}
		return
	}
	type lease struct {
		id    int64
		token string
	}
	at := make(map[lease]int, len(outcomes))
	for i, o := range outcomes {
		at[lease{o.JobID, o.Token}] = i
	}
	for k := range rows {
		if i, ok := at[lease{rows[k].ID, rows[k].Token}]; ok {
			set(i, &rows[k])
		}
	}
}

// applyOutcomes writes outcomes with one statement (and the backoff read and the queue
// creation they may need: the queues only with outcomes that apply), nothing more.
func (e *Engine) applyOutcomes(ctx context.Context, outcomes []StepOutcome) ([]pg.OutcomeApplied, error) {
	outcomes, err := e.withRetryDelays(ctx, outcomes)
	if err != nil {
		return nil, err
	}
	recs := make([]pg.OutcomeRecord, len(outcomes))
	for i, o := range outcomes {
		r, err := o.record()
		if err != nil {
			return nil, err
		}
		recs[i] = r
	}
	credit := false
	for _, o := range outcomes {
		credit = credit || !o.NoGateSlot
	}
	missing := e.missingChildQueues(outcomes)
	var rows []pg.OutcomeApplied
	if len(missing) == 0 {
		rows, err = e.db.JobApplyOutcomes(ctx, recs, credit)
	} else {
		rows, err = e.db.JobApplyOutcomesCreatingQueues(ctx, recs, credit, missing)
	}
	if err == nil && len(rows) > 0 {
		for _, q := range missing {
			e.knownQueues.Store(q, struct{}{})
		}
	}
	if r := e.rollups.Load(); r != nil && len(rows) > 0 {
		r.countApplied(rows)
	}
	return rows, err
}

// refusedOutcome is what o becomes when the database refused it with err: a failed
// attempt that says why (the answer's bodies kept); false when err is not a refusal of o.
func refusedOutcome(o StepOutcome, err error) (StepOutcome, bool) {
	bodies := o.Bodies
	switch {
	case errors.Is(err, ErrConflict) && o.Kind == pg.KindSpawn:
		o.Outcome = ErrorOutcome("error", "spawn refused: a child's key is held by a live job ("+err.Error()+")", o.HTTPStatus, nil, nil)
	case errors.Is(err, ErrInvalid) && o.Label != "bad_response":
		o.Outcome = ErrorOutcome("bad_response", "the database refused the answer: "+err.Error(), o.HTTPStatus, nil, nil)
	default:
		return o, false
	}
	o.Bodies = bodies
	return o, true
}

// withRetryDelays gives every retry without a delay the one the retry policy draws
// (RetryDelay), from its Backoff or, for the outcomes that lack one, from their attempts
// and handlers read with one statement. outcomes itself is left as it was.
func (e *Engine) withRetryDelays(ctx context.Context, outcomes []StepOutcome) ([]StepOutcome, error) {
	if !slices.ContainsFunc(outcomes, func(o StepOutcome) bool { return o.Kind == pg.KindRetry && o.Delay == nil }) {
		return outcomes, nil // nothing to fill in: no copy
	}
	var unknown []pg.Lease
	for _, o := range outcomes {
		if o.Kind == pg.KindRetry && o.Delay == nil && o.Backoff == nil {
			unknown = append(unknown, pg.Lease{JobID: o.JobID, Token: o.Token})
		}
	}
	read := map[pg.Lease]RetryBackoff{}
	if len(unknown) > 0 {
		got, err := e.db.LeaseGetBackoffs(ctx, unknown)
		if err != nil {
			return nil, err
		}
		for _, b := range got {
			read[b.Lease] = backoffOf(b.Attempt, b.BackoffBaseMS, b.BackoffMaxMS)
		}
	}
	out := slices.Clone(outcomes)
	for i, o := range out {
		if o.Kind != pg.KindRetry || o.Delay != nil {
			continue
		}
		b := o.Backoff
		if b == nil {
			found, ok := read[pg.Lease{JobID: o.JobID, Token: o.Token}]
			if !ok {
				// No longer leased: the statement refuses the outcome whatever its delay.
				found = RetryBackoff{}
			}
			b = &found
		}
		out[i].Delay = ptr(b.Delay())
	}
	return out, nil
}

// missingChildQueues names the queues that spawned children name and that this process
// has not seen exist: feeders run the queues of the queues table, so a child in a queue
// without a row would never run, and the outcome statement goes with their creation.
// Costs nothing once a queue is known.
func (e *Engine) missingChildQueues(outcomes []StepOutcome) []string {
	var missing []string
	for _, o := range outcomes {
		for _, c := range o.Children {
			if c.Queue == "" { // the parent's queue, which exists
				continue
			}
			if _, ok := e.knownQueues.Load(c.Queue); !ok && !slices.Contains(missing, c.Queue) {
				missing = append(missing, c.Queue)
			}
		}
	}
	return missing
}

func hasSpawn(outcomes []StepOutcome) bool {
	for _, o := range outcomes {
		if o.Kind == pg.KindSpawn {
			return true
		}
	}
	return false
}

// OutcomeApplied reports an applied outcome: the job's new status, and whether it is
// runnable at once (Ready).
type OutcomeApplied struct {
	ID     int64
	Token  string // the lease token of the outcome that applied
	Status string
	Queue  string
	Ready  bool
}

// OutcomeResult is what became of one outcome of a batch (ApplyOutcomes).
type OutcomeResult struct {
	// OutcomeApplied is the job after the outcome, when Applied.
	OutcomeApplied
	// Applied: the outcome was written. False with no Err: its lease token was not the
	// job's current one, and nothing changed.
	Applied bool
	// Err: the outcome was not written, the statement failed (the lease still holds:
	// writing it again may succeed).
	Err error
}

// ApplyOutcome writes one outcome (the asynchronous-step API); ErrLeaseLost when the
// token is not the job's current one. A transient conflict (a deadlock between two
// outcomes joining the same parent) is tried again, up to applyOutcomeTries in all,
// after a pause that doubles (RetryDelay from applyOutcomeBackoff): the one layer of
// retries of this path, since ApplyOutcomes has none.
func (e *Engine) ApplyOutcome(ctx context.Context, o StepOutcome) (OutcomeApplied, error) {
	r := e.ApplyOutcomes(ctx, []StepOutcome{o})[0]
	for try := 1; try < applyOutcomeTries && errors.Is(r.Err, ErrRetryable); try++ {
		pause := time.NewTimer(RetryDelay(try, applyOutcomeBackoff, time.Second))
		select {
		case <-ctx.Done():
			pause.Stop()
			return OutcomeApplied{}, r.Err
		case <-pause.C:
		}
		r = e.ApplyOutcomes(ctx, []StepOutcome{o})[0]
	}
	switch {
	case r.Err != nil:
		return OutcomeApplied{}, r.Err
	case !r.Applied:
		return OutcomeApplied{}, ErrLeaseLost
	}
	return r.OutcomeApplied, nil
}

// The retries of ApplyOutcome: tries in all, and the first pause's ceiling.
const (
	applyOutcomeTries   = 3
	applyOutcomeBackoff = 20 * time.Millisecond
)
