package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// historyForReplay is how many attempts of a job's history a replay reads to find the
// state a step ran with (the API's page of history).
const historyForReplay = 1000

// finished tells a job that may be replayed or rerun.
func finished(status string) bool {
	return status == "done" || status == "failed" || status == "cancelled"
}

// lastStep is the step a finished job ended at: a done job's step counts its last one
// as completed, a failed or cancelled job's is the step it was at.
func lastStep(j Job) int {
	if j.Status == "done" && j.Step > 0 {
		return j.Step - 1
	}
	return j.Step
}

// Replay runs finished job id again, in place, from step fromStep: with state when given
// (state non-nil; JSON null is a null state), else with the state that step ran with as
// recorded (docs/protocol.md, "Replay and rerun"). It returns the job, runnable. A live
// job is ErrConflict; a step out of range, or a recorded state the history did not keep,
// is a ValidationError naming from_step or state; nothing is written then.
func (e *Engine) Replay(ctx context.Context, id int64, fromStep int, state *json.RawMessage) (JobDetail, error) {
	d, err := e.GetJob(ctx, id)
	if err != nil {
		return JobDetail{}, err
	}
	if !finished(d.Status) {
		return JobDetail{}, fmt.Errorf("%w: job %d is %s: only a done, failed or cancelled job can be replayed (cancel it first)",
			ErrConflict, id, d.Status)
	}
	v := &validator{}
	last := lastStep(d.Job)
	if fromStep < 0 || fromStep > last {
		v.add("from_step", "must be between 0 and %d, the step job %d ended at; got %d", last, id, fromStep)
		return JobDetail{}, v.err()
	}
	var with json.RawMessage
	switch {
	case state != nil:
		with = *state
	case fromStep == 0:
		with = nil // the first step runs with a null state
	case fromStep == last:
		with = d.State // what the job's last step ran with: a done or fail answer leaves it
	default:
		recorded, err := e.recordedState(ctx, id, fromStep)
		if err != nil {
			return JobDetail{}, err
		}
		if recorded == nil {
			v.add("state", "the state step %d ran with was not kept: no attempt of it has its request body in the "+
				"history (its queue's step_bodies setting keeps every attempt's with \"all\"); give the state to run it with", fromStep)
			return JobDetail{}, v.err()
		}
		with = recorded
	}
	if string(with) == "null" {
		with = nil
	}
	if err := e.db.JobReplay(ctx, id, fromStep, with); err != nil {
		if errors.Is(err, ErrNotFound) {
			return JobDetail{}, e.whyNot(ctx, id, "replayed")
		}
		return JobDetail{}, err
	}
	return e.GetJob(ctx, id)
}

// Rerun inserts a new job that runs finished job id again from its first step, with
// input (nil: the old job's), linked to it by RerunOf, and returns it. A live job is
// ErrConflict, and so is a key that a live job holds.
func (e *Engine) Rerun(ctx context.Context, id int64, input json.RawMessage) (JobDetail, error) {
	d, err := e.GetJob(ctx, id)
	if err != nil {
		return JobDetail{}, err
	}
	if !finished(d.Status) {
		return JobDetail{}, fmt.Errorf("%w: job %d is %s: only a done, failed or cancelled job can be rerun", ErrConflict, id, d.Status)
	}
	newID, err := e.db.JobRerun(ctx, id, input)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return JobDetail{}, e.whyNot(ctx, id, "rerun")
		}
		return JobDetail{}, err
	}
	return e.GetJob(ctx, newID)
}

// whyNot says why a replay or rerun statement changed nothing although the job looked
// finished: it is gone, it went live meanwhile, or a child of it is live.
func (e *Engine) whyNot(ctx context.Context, id int64, what string) error {
	d, err := e.GetJob(ctx, id)
	if err != nil {
		return err
	}
	if !finished(d.Status) {
		return fmt.Errorf("%w: job %d is %s: only a done, failed or cancelled job can be %s", ErrConflict, id, d.Status, what)
	}
	return fmt.Errorf("%w: job %d has a live child: it can be %s once its children have finished", ErrConflict, id, what)
}

// recordedState is the state step ran with, read from the request body kept with its
// newest attempt that kept one whole (nil: none did).
func (e *Engine) recordedState(ctx context.Context, id int64, step int) (json.RawMessage, error) {
	rows, err := e.db.StepList(ctx, id, historyForReplay)
	if err != nil {
		return nil, err
	}
	for i := len(rows) - 1; i >= 0; i-- {
		r := rows[i]
		if r.Step != step || r.Bodies == nil || r.Bodies.Request == nil || r.Bodies.Request.Truncated {
			continue
		}
		var req struct {
			Job struct {
				State json.RawMessage `json:"state"`
			} `json:"job"`
		}
		if json.Unmarshal([]byte(r.Bodies.Request.Text), &req) != nil {
			continue
		}
		if req.Job.State == nil {
			return json.RawMessage("null"), nil
		}
		return req.Job.State, nil
	}
	return nil, nil
}
