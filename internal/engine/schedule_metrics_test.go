package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gendurable/gendurable/internal/engine"
)

// gendurable_schedule_ticks_total counts each tick the scheduler fired, per schedule: a
// job made (fired), none because the previous run is live (skipped), none because the
// handler is not registered (no_handler).
func TestScheduleTicksAreCounted(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, engine.Config{})
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	m := engine.NewMetrics(reg, te.db)
	te.SetMetrics(m)
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	s := te.NewScheduler(engine.SchedulerConfig{Now: func() time.Time { return now }})
	for name, overlap := range map[string]string{"minutely-skip": "skip", "minutely-allow": "allow"} {
		if _, err := te.SetSchedule(ctx, name, engine.ScheduleSettings{Cron: "* * * * *", Handler: "h", Overlap: overlap}, start); err != nil {
			t.Fatal(err)
		}
	}
	for minute := 1; minute <= 3; minute++ { // no job ever runs: each one stays runnable
		now = start.Add(time.Duration(minute) * time.Minute)
		if _, err := s.RunDue(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The handler removed: the next ticks make no job.
	if _, err := te.SetSchedule(ctx, "orphan", engine.ScheduleSettings{Cron: "* * * * *", Handler: "h"}, now); err != nil {
		t.Fatal(err)
	}
	if _, err := te.db.Exec(ctx, `DELETE FROM handlers WHERE name = 'h'`); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	if _, err := s.RunDue(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		schedule, outcome string
		want              float64
	}{
		{"minutely-skip", "fired", 1}, {"minutely-skip", "skipped", 3}, // the last one too: its run is live
		{"minutely-allow", "fired", 3}, {"minutely-allow", "skipped", 0}, {"minutely-allow", "no_handler", 1},
		{"orphan", "fired", 0}, {"orphan", "no_handler", 1},
	} {
		if got := testutil.ToFloat64(m.ScheduleTicks.WithLabelValues(c.schedule, c.outcome)); got != c.want {
			t.Errorf("%s %s: %v, want %v", c.schedule, c.outcome, got, c.want)
		}
	}
}
