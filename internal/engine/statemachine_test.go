package engine_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
)

// want is what the state machine says a step's outcome does to its job.
type want struct {
	status string
	wake   string
	step   int // the job's step after the outcome (it was 0)
}

// expectOutcome is the state machine of docs/protocol.md, written out on its own so the
// table below checks the SQL against it: done and fail end the job whatever else holds;
// a requested cancel ends it at any other answer (a cancelled spawn creates no children
// and stays at its step); a retry fails on its last attempt; an await parks unless a
// signal it names arrived during the step; a spawn of children parks until they end.
func expectOutcome(kind string, lastAttempt, cancel bool, late string) want {
	advances := map[string]bool{"next": true, "await": true, "spawn": true, "done": true}[kind]
	step := 0
	if advances {
		step = 1
	}
	switch {
	case kind == "done":
		return want{"done", "", 1}
	case kind == "fail":
		return want{"failed", "", 0}
	case cancel:
		if kind == "spawn" {
			step = 0
		}
		return want{"cancelled", "", step}
	case kind == "retry" && lastAttempt:
		return want{"failed", "", 0}
	case kind == "retry", kind == "next":
		return want{"runnable", "", step}
	case kind == "await" && late == "named":
		return want{"runnable", "signal", 1}
	default: // await with no signal or another name; spawn of one child
		return want{"awaiting", "", 1}
	}
}

// Every outcome kind × the last attempt or not × a cancel requested or not × no signal, a
// signal the await names, or another one arriving during the step: the job's status,
// wake reason and step, the history row, and the lease released.
func TestOutcomeStateMachine(t *testing.T) {
	t.Parallel()
	kinds := []string{"next", "await", "spawn", "done", "fail", "retry"}
	for _, kind := range kinds {
		for _, lastAttempt := range []bool{false, true} {
			for _, cancel := range []bool{false, true} {
				for _, late := range []string{"none", "named", "other"} {
					name := fmt.Sprintf("%s/last=%v/cancel=%v/signal=%s", kind, lastAttempt, cancel, late)
					t.Run(name, func(t *testing.T) {
						t.Parallel()
						ctx := context.Background()
						te := newTestEngine(t, engine.Config{})
						maxAttempts := 2
						if lastAttempt {
							maxAttempts = 1
						}
						id := te.insert(t, engine.NewJob{MaxAttempts: &maxAttempts})
						st := te.claim(t)
						if cancel {
							if err := te.Cancel(ctx, id); err != nil {
								t.Fatal(err)
							}
						}
						switch late {
						case "named":
							te.signal(t, id, "go")
						case "other":
							te.signal(t, id, "noise")
						}
						var o engine.Outcome
						var err error
						switch kind {
						case "await":
							o = await("go")
						case "spawn":
							o, err = engine.DecodeResponse([]byte(`{"spawn": {"children": [{"handler": "h"}]}}`))
						default:
							o, err = engine.DecodeResponse([]byte(fmt.Sprintf(`{%q: {}}`, kind)))
						}
						if err != nil {
							t.Fatal(err)
						}
						te.apply(t, st, o)
						w := expectOutcome(kind, lastAttempt, cancel, late)
						j := te.job(t, id)
						if j.Status != w.status || wakeOf(j) != w.wake || j.Step != w.step {
							t.Fatalf("status %s wake %q step %d, want %s %q %d", j.Status, wakeOf(j), j.Step, w.status, w.wake, w.step)
						}
						if j.LeaseExpiresAt != nil || j.LeaseOwner != nil {
							t.Fatalf("the lease was not released: %v %v", j.LeaseExpiresAt, j.LeaseOwner)
						}
						terminal := w.status == "done" || w.status == "failed" || w.status == "cancelled"
						if terminal != (j.FinishedAt != nil) {
							t.Fatalf("finished_at %v for status %s", j.FinishedAt, j.Status)
						}
						wantChildren := 0
						if kind == "spawn" && !cancel {
							wantChildren = 1
						}
						if j.ChildrenTotal != wantChildren || j.PendingChildren != wantChildren {
							t.Fatalf("children %d pending %d, want %d", j.ChildrenTotal, j.PendingChildren, wantChildren)
						}
						rows, err := te.db.QueryStrings(ctx, `SELECT step || '/' || attempt || '/' || outcome FROM steps WHERE job_id = $1`, id)
						if err != nil || len(rows) != 1 || rows[0][0] != "0/1/"+kind {
							t.Fatalf("history %v (%v), want one row 0/1/%s", rows, err, kind)
						}
						// A second outcome with the same token changes nothing.
						if _, err := te.ApplyOutcome(ctx, engine.StepOutcome{JobID: id, Token: st.LeaseToken,
							Outcome: engine.Outcome{Kind: pg.KindDone, Label: "done"}}); err != engine.ErrLeaseLost {
							t.Fatalf("a second outcome: %v", err)
						}
					})
				}
			}
		}
	}
}

// A parent waiting for its children: each child that ends, however it ends, counts down
// pending_children; the last one wakes the parent with wake "children"; a child retried
// with attempts left does not count.
func TestChildrenJoinTheirParent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, ending := range []string{"done", "fail", "retry-last", "cancel"} {
		t.Run(ending, func(t *testing.T) {
			t.Parallel()
			te := newTestEngine(t, engine.Config{})
			parent := te.insert(t, engine.NewJob{})
			o, _ := engine.DecodeResponse([]byte(`{"spawn": {"children": [{"handler": "h", "max_attempts": 1}, {"handler": "h", "max_attempts": 1}]}}`))
			te.apply(t, te.claim(t), o)
			steps, _, err := te.Claim(ctx, "default", 10)
			if err != nil || len(steps) != 2 {
				t.Fatalf("claimed %d children (%v)", len(steps), err)
			}
			end := func(st engine.Step) {
				switch ending {
				case "cancel":
					if err := te.Cancel(ctx, st.ID); err != nil {
						t.Fatal(err)
					}
					te.apply(t, st, engine.Outcome{Kind: pg.KindNext, Label: "next"})
				case "retry-last":
					te.apply(t, st, engine.Outcome{Kind: pg.KindRetry, Label: "retry"})
				default:
					o, _ := engine.DecodeResponse([]byte(fmt.Sprintf(`{%q: {}}`, ending)))
					te.apply(t, st, o)
				}
			}
			end(steps[0])
			if j := te.job(t, parent); j.Status != "awaiting" || j.PendingChildren != 1 {
				t.Fatalf("after the first child: %s pending %d", j.Status, j.PendingChildren)
			}
			end(steps[1])
			j := te.job(t, parent)
			if j.Status != "runnable" || wakeOf(j) != "children" || j.PendingChildren != 0 || j.ChildrenFinished != 2 {
				t.Fatalf("after the last child: %s wake %q pending %d finished %d", j.Status, wakeOf(j), j.PendingChildren, j.ChildrenFinished)
			}
			st := te.claim(t)
			if len(st.Children) != 2 || st.Wake == nil || *st.Wake != "children" {
				t.Fatalf("the join was shown %d children, wake %v", len(st.Children), st.Wake)
			}
		})
	}
}
