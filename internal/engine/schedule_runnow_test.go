package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
)

// "Run now" makes the schedule's job at once, as its own (listed with its runs, the
// schedule's input), and leaves its next tick as it was. With overlap "skip" a second
// run now while the first is live is refused, and so is a paused schedule and one whose
// handler is gone (naming handler); none of them writes a job.
func TestRunScheduleNowMakesItsJobAndKeepsItsNextTick(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	s, err := te.SetSchedule(ctx, "yearly", engine.ScheduleSettings{Cron: "0 0 1 1 *", Handler: "h", Queue: "reports",
		Input: json.RawMessage(`{"kind": "annual"}`), Overlap: "skip"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	j, err := te.RunScheduleNow(ctx, "yearly", nil)
	if err != nil {
		t.Fatal(err)
	}
	if j.ScheduleName == nil || *j.ScheduleName != "yearly" || j.Queue != "reports" || j.Status != "runnable" ||
		!jsonEqual(j.Input, `{"kind": "annual"}`) || j.ScheduleTick == nil || time.Since(*j.ScheduleTick) > time.Minute {
		t.Fatalf("the job run now: %+v", j.Job)
	}
	after, err := te.GetSchedule(ctx, "yearly")
	if err != nil || !after.NextRunAt.Equal(s.NextRunAt) {
		t.Fatalf("the next tick moved from %s to %s (%v)", s.NextRunAt, after.NextRunAt, err)
	}
	jobs := func() int64 {
		n, err := te.db.QueryInt(ctx, `SELECT count(*) FROM jobs`)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if _, err := te.RunScheduleNow(ctx, "yearly", nil); !errors.Is(err, engine.ErrConflict) {
		t.Fatalf("a second run now while the first is live (overlap skip): %v", err)
	}
	if _, err := te.SetSchedule(ctx, "paused", engine.ScheduleSettings{Cron: "0 0 1 1 *", Handler: "h", Paused: true}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := te.RunScheduleNow(ctx, "paused", nil); !errors.Is(err, engine.ErrConflict) {
		t.Fatalf("running a paused schedule: %v", err)
	}
	if _, err := te.RunScheduleNow(ctx, "nobody", nil); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("running a missing schedule: %v", err)
	}
	if _, err := te.SetSchedule(ctx, "orphan", engine.ScheduleSettings{Cron: "0 0 1 1 *", Handler: "h", Overlap: "allow"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	// overlap allow: a second run now while the first is live is fine.
	if _, err := te.RunScheduleNow(ctx, "orphan", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := te.RunScheduleNow(ctx, "orphan", nil); err != nil {
		t.Fatalf("a second run now with overlap allow: %v", err)
	}
	before := jobs()
	if err := te.DeleteHandler(ctx, "h"); err != nil {
		t.Fatal(err)
	}
	if _, err := te.RunScheduleNow(ctx, "orphan", nil); fieldOf(err) != "handler" {
		t.Fatalf("running a schedule whose handler is gone: %v", err)
	}
	if n := jobs(); n != before {
		t.Fatalf("refused runs wrote %d jobs", n-before)
	}
}
