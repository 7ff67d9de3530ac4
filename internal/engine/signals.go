package engine

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/gendurable/gendurable/internal/pg"
)

// SignalTarget addresses a signal: a job id, or the key a live job holds.
type SignalTarget struct {
	JobID *int64
	Key   *string
	// TraceContext is the sender's W3C trace context (TraceContextOf; nil: none): a job
	// without a trace context of its own takes it, and its next steps continue it.
	TraceContext *string
}

// SignalSent is the answer to a delivered signal.
type SignalSent struct {
	SignalID int64
	JobID    int64
	// Woke: the signal made an awaiting job runnable.
	Woke bool
}

// Signal delivers a signal in one statement. ErrNotFound when no job (or no live job
// with the key) exists, ErrConflict when the job has finished.
func (e *Engine) Signal(ctx context.Context, to SignalTarget, name string, payload json.RawMessage) (SignalSent, error) {
	v := &validator{}
	if name == "" || len(name) > 200 {
		v.add("name", "must be 1-200 characters")
	}
	if len(payload) > 0 && !json.Valid(payload) {
		v.add("payload", "is not valid JSON")
	}
	if (to.JobID == nil) == (to.Key == nil) {
		v.add("key", "address the signal to a job id or to a key")
	}
	if err := v.err(); err != nil {
		return SignalSent{}, err
	}
	if len(jsonOrNil(payload)) == 0 {
		payload = nil
	}
	d, err := e.db.SignalDeliver(ctx, to.JobID, to.Key, name, payload, to.TraceContext)
	if err != nil {
		return SignalSent{}, err
	}
	if d.SignalID == nil {
		return SignalSent{}, fmt.Errorf("%w: job %d is %s and takes no more signals", ErrConflict, d.JobID, d.JobStatus)
	}
	return SignalSent{SignalID: *d.SignalID, JobID: d.JobID, Woke: d.Woke}, nil
}

// Cancel cancels a live job and its live descendants (an executing one when its step's
// outcome arrives). ErrNotFound for no such job, ErrConflict for a finished one.
func (e *Engine) Cancel(ctx context.Context, id int64) error {
	found, changed, err := e.db.JobCancel(ctx, id)
	switch {
	case err != nil:
		return err
	case !found:
		return ErrNotFound
	case changed == 0:
		return fmt.Errorf("%w: job %d has already finished", ErrConflict, id)
	}
	return nil
}

// Retry runs a failed or cancelled job again from its current step with fresh attempts.
func (e *Engine) Retry(ctx context.Context, id int64) error {
	err := e.db.JobRetry(ctx, id)
	if err == ErrNotFound {
		if _, getErr := e.db.JobGet(ctx, id); getErr != nil {
			return getErr
		}
		return fmt.Errorf("%w: only a failed or cancelled job can be retried", ErrConflict)
	}
	return err
}

// Children lists a job's children, newest first (keyset on id).
func (e *Engine) Children(ctx context.Context, parent int64, before *int64, limit int) ([]Job, error) {
	if _, err := e.db.JobGet(ctx, parent); err != nil {
		return nil, err
	}
	rows, err := e.db.JobList(ctx, pg.JobListParams{ParentID: &parent, Before: before, Limit: limit})
	if err != nil {
		return nil, err
	}
	return jobsOf(rows), nil
}
