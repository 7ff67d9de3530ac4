package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
)

// runStep claims the one runnable step of "default", checks the step and state it is
// shown, and answers o with the request body a dispatcher would keep (step_bodies "all").
func (te testEngine) runStep(t *testing.T, wantStep int, wantState string, o engine.Outcome) engine.Step {
	t.Helper()
	st := te.claim(t)
	if st.Step != wantStep || !jsonEqual(st.State, wantState) {
		t.Fatalf("claimed step %d with state %s, want step %d with %s", st.Step, st.State, wantStep, wantState)
	}
	state := st.State
	if len(state) == 0 {
		state = json.RawMessage("null")
	}
	req, _ := json.Marshal(map[string]any{"job": map[string]any{"id": st.ID, "step": st.Step, "state": state}})
	o.Bodies = te.StepBodies(req, []byte(`{}`), true)
	te.apply(t, st, o)
	return st
}

func jsonEqual(got json.RawMessage, want string) bool {
	if len(got) == 0 {
		got = json.RawMessage("null")
	}
	var a, b any
	return json.Unmarshal(got, &a) == nil && json.Unmarshal([]byte(want), &b) == nil && mustJSON(a) == mustJSON(b)
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func next(state string) engine.Outcome {
	return engine.Outcome{Kind: pg.KindNext, Label: "next", State: json.RawMessage(state)}
}

// unchanged fails the test when job id's row changed since before (a refused replay or
// rerun writes nothing).
func (te testEngine) unchanged(t *testing.T, id int64, before pg.JobDetail, what string) {
	t.Helper()
	after := te.job(t, id)
	if !after.UpdatedAt.Equal(before.UpdatedAt) || after.Status != before.Status || after.Step != before.Step {
		t.Fatalf("%s changed job %d: %s step %d (updated %s), was %s step %d (updated %s)", what, id,
			after.Status, after.Step, after.UpdatedAt, before.Status, before.Step, before.UpdatedAt)
	}
}

func fieldOf(err error) string {
	var v *engine.ValidationError
	if errors.As(err, &v) && len(v.Errors) > 0 {
		return v.Errors[0].Field
	}
	return ""
}

// A finished job replayed from a step runs that step again with the state it ran with:
// the recorded one (from the request body the history kept, the job's own for the step
// it ended at, null for the first), or an edited one. The replay keeps the history and
// appends to it, clears the result and error, gives fresh attempts; a live job, a step
// out of range and a state the history did not keep are refused and write nothing.
func TestReplayRunsAFinishedJobAgainFromAStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	id := te.insert(t, engine.NewJob{Input: json.RawMessage(`{"order": 7}`)})

	// Live: refused, nothing written.
	before := te.job(t, id)
	if _, err := te.Replay(ctx, id, 0, nil); !errors.Is(err, engine.ErrConflict) {
		t.Fatalf("replaying a runnable job: %v, want a conflict", err)
	}
	if _, err := te.Rerun(ctx, id, nil); !errors.Is(err, engine.ErrConflict) {
		t.Fatalf("rerunning a runnable job: %v, want a conflict", err)
	}
	te.unchanged(t, id, before, "a refused replay of a live job")

	te.runStep(t, 0, `null`, next(`{"n": 1}`))
	te.runStep(t, 1, `{"n": 1}`, next(`{"n": 2}`))
	te.runStep(t, 2, `{"n": 2}`, engine.Outcome{Kind: pg.KindFail, Label: "fail", Error: json.RawMessage(`{"message": "card declined"}`)})
	failed := te.job(t, id)
	if failed.Status != "failed" || failed.Step != 2 {
		t.Fatalf("the job is %s at step %d, want failed at 2", failed.Status, failed.Step)
	}

	// Out of range: named, nothing written.
	for _, step := range []int{3, -1} {
		if _, err := te.Replay(ctx, id, step, nil); fieldOf(err) != "from_step" {
			t.Fatalf("replaying from step %d: %v, want a from_step error", step, err)
		}
	}
	te.unchanged(t, id, failed, "a refused replay from a step out of range")

	// From step 1 with its recorded state.
	got, err := te.Replay(ctx, id, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != "runnable" || got.Step != 1 || got.Attempt != 0 || got.Error != nil || got.FinishedAt != nil ||
		!jsonEqual(got.State, `{"n": 1}`) {
		t.Fatalf("the replayed job: %s step %d attempt %d error %s finished %v state %s", got.Status, got.Step,
			got.Attempt, got.Error, got.FinishedAt, got.State)
	}
	te.runStep(t, 1, `{"n": 1}`, engine.Outcome{Kind: pg.KindDone, Label: "done", Result: json.RawMessage(`{"ok": true}`)})
	done := te.job(t, id)
	if done.Status != "done" || !jsonEqual(done.Result, `{"ok": true}`) {
		t.Fatalf("after the replay the job is %s with result %s", done.Status, done.Result)
	}
	hist, err := te.ListSteps(ctx, id, 100)
	if err != nil {
		t.Fatal(err)
	}
	var steps []int
	for _, h := range hist {
		steps = append(steps, h.Step)
	}
	if mustJSON(steps) != "[0,1,2,1]" {
		t.Fatalf("the history's steps are %v, want the first run's 0, 1, 2 and the replay's 1", steps)
	}

	// The step it ended at (a done job's last step, 1): the job's own state.
	if _, err := te.Replay(ctx, id, 2, nil); fieldOf(err) != "from_step" {
		t.Fatalf("replaying a done job past its last step: %v", err)
	}
	if _, err := te.Replay(ctx, id, 1, nil); err != nil {
		t.Fatal(err)
	}
	te.runStep(t, 1, `{"n": 1}`, engine.Outcome{Kind: pg.KindDone, Label: "done"})

	// From the first step: a null state; with an edited state: that one.
	if _, err := te.Replay(ctx, id, 0, nil); err != nil {
		t.Fatal(err)
	}
	te.runStep(t, 0, `null`, engine.Outcome{Kind: pg.KindDone, Label: "done"})
	edited := json.RawMessage(`{"n": 40, "note": "edited"}`)
	if _, err := te.Replay(ctx, id, 0, &edited); err != nil {
		t.Fatal(err)
	}
	te.runStep(t, 0, string(edited), engine.Outcome{Kind: pg.KindDone, Label: "done"})
}

// A step whose request body the history did not keep has no recorded state: its replay
// is refused naming state (nothing written) unless the state is given.
func TestReplayNeedsAStateTheHistoryDidNotKeep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	id := te.insert(t, engine.NewJob{})
	for step, o := range []engine.Outcome{next(`{"a": 1}`), next(`{"a": 2}`), {Kind: pg.KindDone, Label: "done"}} {
		st := te.claim(t)
		if st.Step != step {
			t.Fatalf("claimed step %d, want %d", st.Step, step)
		}
		te.apply(t, st, o) // no bodies kept: the default for next and done
	}
	done := te.job(t, id)
	if _, err := te.Replay(ctx, id, 1, nil); fieldOf(err) != "state" {
		t.Fatalf("replaying a step whose state was not kept: %v, want a state error", err)
	}
	te.unchanged(t, id, done, "a refused replay without a state")
	given := json.RawMessage(`{"a": 1}`)
	if _, err := te.Replay(ctx, id, 1, &given); err != nil {
		t.Fatal(err)
	}
	if st := te.claim(t); st.Step != 1 || !jsonEqual(st.State, `{"a": 1}`) {
		t.Fatalf("claimed step %d with %s", st.Step, st.State)
	}
}

// A replay and a rerun keep the key's rule: a live job holding the key refuses them (409,
// nothing written). A rerun is a new job linked to the old one by rerun_of, with the old
// job's handler, queue, key and attempts and an edited input (or the old one); not its
// parent. A job with a live child is refused until its children have finished.
func TestRerunIsANewLinkedJobAndKeysStayUnique(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	key := "order-7"
	three := 3
	id := te.insert(t, engine.NewJob{Key: &key, Input: json.RawMessage(`{"order": 7}`), MaxAttempts: &three, Priority: ptrInt(2)})
	te.apply(t, te.claim(t), engine.Outcome{Kind: pg.KindDone, Label: "done"})

	rerun, err := te.Rerun(ctx, id, json.RawMessage(`{"order": 7, "retry": true}`))
	if err != nil {
		t.Fatal(err)
	}
	if rerun.ID == id || rerun.RerunOf == nil || *rerun.RerunOf != id || rerun.Status != "runnable" || rerun.Step != 0 ||
		rerun.Key == nil || *rerun.Key != key || rerun.MaxAttempts != 3 || rerun.Priority != 2 || rerun.Handler != "h" ||
		!jsonEqual(rerun.Input, `{"order": 7, "retry": true}`) {
		t.Fatalf("the rerun: %+v", rerun.Job)
	}
	// The rerun holds the key now: the old job's replay and another rerun are refused.
	old := te.job(t, id)
	if _, err := te.Replay(ctx, id, 0, nil); !errors.Is(err, engine.ErrConflict) {
		t.Fatalf("replaying while a live job holds the key: %v", err)
	}
	if _, err := te.Rerun(ctx, id, nil); !errors.Is(err, engine.ErrConflict) {
		t.Fatalf("rerunning while a live job holds the key: %v", err)
	}
	te.unchanged(t, id, old, "a replay refused for its key")
	if n, err := te.db.QueryInt(ctx, `SELECT count(*) FROM jobs WHERE key = $1`, key); err != nil || n != 2 {
		t.Fatalf("%d jobs hold the key (%v), want the old one and its rerun", n, err)
	}
	// With the old input when none is given.
	te.apply(t, te.claim(t), engine.Outcome{Kind: pg.KindDone, Label: "done"})
	again, err := te.Rerun(ctx, rerun.ID, nil)
	if err != nil || !jsonEqual(again.Input, `{"order": 7, "retry": true}`) || *again.RerunOf != rerun.ID {
		t.Fatalf("a rerun with the old input: %+v (%v)", again.Job, err)
	}
	te.apply(t, te.claim(t), engine.Outcome{Kind: pg.KindDone, Label: "done"})

	// A parent with a live child: cancelled with its family, the child retried alone.
	parent := te.insert(t, engine.NewJob{})
	te.apply(t, te.claim(t), engine.Outcome{Kind: pg.KindSpawn, Label: "spawn",
		Children: []pg.JobInsert{{Handler: "h", Input: json.RawMessage(`{}`)}}})
	if err := te.Cancel(ctx, parent); err != nil {
		t.Fatal(err)
	}
	kids, err := te.Children(ctx, parent, nil, 10)
	if err != nil || len(kids) != 1 {
		t.Fatalf("%d children (%v)", len(kids), err)
	}
	if err := te.Retry(ctx, kids[0].ID); err != nil {
		t.Fatal(err)
	}
	cancelled := te.job(t, parent)
	if _, err := te.Replay(ctx, parent, 0, nil); !errors.Is(err, engine.ErrConflict) {
		t.Fatalf("replaying a job with a live child: %v", err)
	}
	te.unchanged(t, parent, cancelled, "a replay refused for a live child")
	if _, err := te.Replay(ctx, 1<<40, 0, nil); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("replaying a missing job: %v", err)
	}
}

func ptrInt(v int) *int { return &v }
