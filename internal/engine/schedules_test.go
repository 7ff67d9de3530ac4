package engine_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// The next tick follows the timezone's wall clock: DST gaps and repeats fire each local
// time once, @every counts elapsed time, 6 fields take seconds.
func TestScheduleSpecNextTick(t *testing.T) {
	t.Parallel()
	paris, _ := time.LoadLocation("Europe/Paris")
	ny, _ := time.LoadLocation("America/New_York")
	at := func(loc *time.Location, y int, mo time.Month, d, h, mi, s int) time.Time {
		return time.Date(y, mo, d, h, mi, s, 0, loc)
	}
	cases := []struct {
		name, cron, tz string
		from           time.Time
		want           []time.Time
	}{
		{"every 5 minutes", "*/5 * * * *", "UTC", at(time.UTC, 2025, 1, 1, 10, 3, 0),
			[]time.Time{at(time.UTC, 2025, 1, 1, 10, 5, 0), at(time.UTC, 2025, 1, 1, 10, 10, 0)}},
		{"seconds field", "*/20 * * * * *", "UTC", at(time.UTC, 2025, 1, 1, 10, 0, 5),
			[]time.Time{at(time.UTC, 2025, 1, 1, 10, 0, 20), at(time.UTC, 2025, 1, 1, 10, 0, 40)}},
		{"every 30s counts elapsed time", "@every 30s", "Europe/Paris", at(time.UTC, 2025, 1, 1, 10, 0, 5),
			[]time.Time{at(time.UTC, 2025, 1, 1, 10, 0, 35), at(time.UTC, 2025, 1, 1, 10, 1, 5)}},
		{"daily in Paris is 9:00 local in winter and summer", "0 9 * * *", "Europe/Paris", at(paris, 2025, 3, 29, 12, 0, 0),
			[]time.Time{at(paris, 2025, 3, 30, 9, 0, 0), at(paris, 2025, 3, 31, 9, 0, 0)}},
		{"spring forward: 02:30 does not exist, fires past the gap once", "30 2 * * *", "Europe/Paris", at(paris, 2025, 3, 29, 12, 0, 0),
			[]time.Time{at(paris, 2025, 3, 30, 3, 30, 0), at(paris, 2025, 3, 31, 2, 30, 0)}},
		{"fall back: 02:30 happens twice, fires once", "30 2 * * *", "Europe/Paris", at(paris, 2025, 10, 25, 12, 0, 0),
			[]time.Time{time.Date(2025, 10, 26, 0, 30, 0, 0, time.UTC), at(paris, 2025, 10, 27, 2, 30, 0)}},
		{"fall back: the repeated hour's local times are not fired again", "*/30 * * * *", "Europe/Paris",
			time.Date(2025, 10, 26, 0, 0, 0, 0, time.UTC), // 02:00 CEST
			[]time.Time{time.Date(2025, 10, 26, 0, 30, 0, 0, time.UTC), time.Date(2025, 10, 26, 2, 0, 0, 0, time.UTC)}},
		{"New York spring forward", "0 2 * * *", "America/New_York", at(ny, 2025, 3, 8, 12, 0, 0),
			[]time.Time{at(ny, 2025, 3, 9, 3, 0, 0), at(ny, 2025, 3, 10, 2, 0, 0)}},
		{"descriptor", "@hourly", "UTC", at(time.UTC, 2025, 1, 1, 10, 3, 0),
			[]time.Time{at(time.UTC, 2025, 1, 1, 11, 0, 0), at(time.UTC, 2025, 1, 1, 12, 0, 0)}},
	}
	for _, c := range cases {
		spec, err := engine.ParseScheduleSpec(c.cron, c.tz)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := c.from
		for i, want := range c.want {
			got = spec.Next(got)
			if !got.Equal(want) {
				t.Errorf("%s: tick %d = %s, want %s", c.name, i, got.UTC(), want.UTC())
				break
			}
		}
	}
	// After downtime only the most recent tick runs.
	spec, _ := engine.ParseScheduleSpec("*/5 * * * *", "UTC")
	due, now := at(time.UTC, 2025, 1, 1, 0, 5, 0), at(time.UTC, 2025, 3, 1, 7, 33, 0)
	if got := spec.Latest(due, now); !got.Equal(at(time.UTC, 2025, 3, 1, 7, 30, 0)) {
		t.Errorf("latest tick after downtime = %s, want 07:30", got)
	}
	every, _ := engine.ParseScheduleSpec("@every 30s", "UTC")
	if got := every.Latest(due, due.Add(95*time.Second)); !got.Equal(due.Add(90 * time.Second)) {
		t.Errorf("latest @every tick = %s, want due+90s", got)
	}
}

// Three engines (three pools, as three processes) fire the same ticks at once: each tick
// makes exactly one job, stamped with its schedule and tick.
func TestScheduleFiresOneJobPerTickAcrossEngines(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, engine.Config{})
	ctx := context.Background()
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := te.SetSchedule(ctx, "every10s", engine.ScheduleSettings{Cron: "*/10 * * * * *", Handler: "h"}, start); err != nil {
		t.Fatal(err)
	}
	var clock atomic.Int64
	clock.Store(start.UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()).UTC() }
	schedulers := make([]*engine.Scheduler, 3)
	for i := range schedulers {
		db := pgtest.Open(t, te.url, pg.Options{})
		eng, err := engine.New(db, engine.Config{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		schedulers[i] = eng.NewScheduler(engine.SchedulerConfig{Now: now})
	}
	const ticks = 20
	fired := 0
	for i := 1; i <= ticks; i++ {
		clock.Store(start.Add(time.Duration(i) * 10 * time.Second).UnixNano())
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, s := range schedulers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := s.RunDue(ctx)
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				fired += st.Fired
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	jobs, err := te.ListJobs(ctx, engine.JobFilter{Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != ticks || fired != ticks {
		t.Fatalf("%d jobs (%d reported fired) for %d ticks", len(jobs), fired, ticks)
	}
	seen := map[time.Time]bool{}
	for _, j := range jobs {
		if j.ScheduleName == nil || *j.ScheduleName != "every10s" || j.ScheduleTick == nil {
			t.Fatalf("job %d does not name its schedule and tick: %v %v", j.ID, j.ScheduleName, j.ScheduleTick)
		}
		seen[j.ScheduleTick.UTC()] = true
	}
	for i := 1; i <= ticks; i++ {
		if tick := start.Add(time.Duration(i) * 10 * time.Second); !seen[tick] {
			t.Errorf("no job for tick %s", tick)
		}
	}
}

// scheduleRunner sets schedule name at start and answers a pass of a scheduler whose
// clock reads the time it is given.
func scheduleRunner(t *testing.T, te testEngine, name string, settings engine.ScheduleSettings, start time.Time) func(at time.Time) engine.SchedulerStats {
	t.Helper()
	ctx := context.Background()
	now := start
	s := te.NewScheduler(engine.SchedulerConfig{Now: func() time.Time { return now }})
	if _, err := te.SetSchedule(ctx, name, settings, start); err != nil {
		t.Fatal(err)
	}
	return func(at time.Time) engine.SchedulerStats {
		t.Helper()
		now = at
		st, err := s.RunDue(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
}

// A pass that comes less than ScheduleCatchUp after a due tick (a stalled process, a busy
// machine) fires each tick it missed, in order, in that one pass; one that comes later
// fires only the most recent tick.
func TestScheduleCatchesUpTicksMissedByALatePass(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, engine.Config{})
	ctx := context.Background()
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	run := scheduleRunner(t, te, "every10s", engine.ScheduleSettings{Cron: "*/10 * * * * *", Handler: "h"}, start)
	ticksOf := func() []time.Time {
		t.Helper()
		jobs, err := te.ListJobs(ctx, engine.JobFilter{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		var ticks []time.Time
		for _, j := range jobs {
			ticks = append(ticks, j.ScheduleTick.UTC())
		}
		slices.SortFunc(ticks, time.Time.Compare)
		return ticks
	}
	// Due at :10; the pass comes at :45, 35 s late: :10, :20, :30 and :40 each make a job.
	if st := run(start.Add(45 * time.Second)); st.Fired != 4 || !st.Next.Equal(start.Add(50*time.Second)) {
		t.Fatalf("a pass 35 s late: %+v, want 4 fired and the next tick at :50", st)
	}
	// Due at :50; the pass comes 5 minutes later: only 05:50 runs.
	if st := run(start.Add(5*time.Minute + 55*time.Second)); st.Fired != 1 || !st.Next.Equal(start.Add(6*time.Minute)) {
		t.Fatalf("a pass 5 minutes late: %+v, want 1 fired and the next tick at 06:00", st)
	}
	want := []time.Time{start.Add(10 * time.Second), start.Add(20 * time.Second), start.Add(30 * time.Second),
		start.Add(40 * time.Second), start.Add(5*time.Minute + 50*time.Second)}
	if got := ticksOf(); !slices.EqualFunc(got, want, time.Time.Equal) {
		t.Fatalf("ticks with a job: %v, want %v", got, want)
	}
}

// overlap "skip" makes nothing while the previous run is live; after downtime only the
// most recent tick runs; a paused schedule fires nothing.
func TestScheduleSkipOverlapAndDowntime(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, engine.Config{})
	ctx := context.Background()
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	run := scheduleRunner(t, te, "minutely", engine.ScheduleSettings{Cron: "* * * * *", Handler: "h", Overlap: "skip"}, start)
	if st := run(start.Add(time.Minute)); st.Fired != 1 || !st.Next.Equal(start.Add(2*time.Minute)) {
		t.Fatalf("first tick: %+v", st)
	}
	if st := run(start.Add(2 * time.Minute)); st.Fired != 0 || st.Skipped != 1 {
		t.Fatalf("tick while the previous run is live: %+v, want skipped", st)
	}
	step := te.claim(t)
	te.apply(t, step, engine.Outcome{Kind: pg.KindDone, Label: "done"})
	// Down for an hour and a half: one job, for the most recent tick.
	back := start.Add(92*time.Minute + 30*time.Second)
	st := run(back)
	if st.Fired != 1 || !st.Next.Equal(start.Add(93*time.Minute)) {
		t.Fatalf("after downtime: %+v", st)
	}
	sch, err := te.GetSchedule(ctx, "minutely")
	if err != nil {
		t.Fatal(err)
	}
	last, err := te.GetJob(ctx, sch.LastJobID)
	if err != nil {
		t.Fatal(err)
	}
	if !last.ScheduleTick.Equal(start.Add(92 * time.Minute)) {
		t.Fatalf("the job after downtime is for tick %s, want the most recent (00:92)", last.ScheduleTick)
	}
	if jobs, _ := te.ListJobs(ctx, engine.JobFilter{Limit: 100}); len(jobs) != 2 {
		t.Fatalf("%d jobs, want 2 (missed ticks are not replayed)", len(jobs))
	}
	if _, err := te.SetSchedule(ctx, "minutely", engine.ScheduleSettings{Cron: "* * * * *", Handler: "h", Paused: true}, back); err != nil {
		t.Fatal(err)
	}
	if st := run(start.Add(200 * time.Minute)); st.Fired+st.Skipped != 0 || !st.Next.IsZero() {
		t.Fatalf("paused schedule fired: %+v", st)
	}
}

// Bad cron, unknown timezone, unknown handler, bad overlap: each names its field and
// nothing is written.
func TestSetScheduleValidation(t *testing.T) {
	t.Parallel()
	te := newTestEngine(t, engine.Config{})
	ctx := context.Background()
	for _, c := range []struct {
		s     engine.ScheduleSettings
		field string
	}{
		{engine.ScheduleSettings{Cron: "*/5 * * *", Handler: "h"}, "cron"},
		{engine.ScheduleSettings{Cron: "61 * * * *", Handler: "h"}, "cron"},
		{engine.ScheduleSettings{Cron: "@every nope", Handler: "h"}, "cron"},
		{engine.ScheduleSettings{Cron: "* * * * *", Timezone: "Mars/Olympus", Handler: "h"}, "timezone"},
		{engine.ScheduleSettings{Cron: "* * * * *", Handler: "nope"}, "handler"},
		{engine.ScheduleSettings{Cron: "* * * * *", Handler: "h", Overlap: "sometimes"}, "overlap"},
	} {
		_, err := te.SetSchedule(ctx, "s", c.s, time.Now())
		var ve *engine.ValidationError
		if !errors.As(err, &ve) || ve.Errors[0].Field != c.field {
			t.Errorf("%+v: %v, want a validation error on %s", c.s, err, c.field)
		}
	}
	if all, err := te.ListSchedules(ctx); err != nil || len(all) != 0 {
		t.Fatalf("schedules written by refused requests: %v %v", all, err)
	}
}

// An Idempotency-Key answers the job it made within the window, also after it finished,
// in a batch too; past the window a new job is made; many concurrent inserts make one.
func TestIdempotencyKeyOutlivesTheJob(t *testing.T) {
	t.Parallel()
	var clock atomic.Pointer[time.Time]
	te := newTestEngine(t, engine.Config{IdempotencyWindow: time.Hour, IdempotencyClock: func() time.Time {
		if c := clock.Load(); c != nil {
			return *c
		}
		return time.Now()
	}})
	ctx := context.Background()
	key := func(s string) *string { return &s }
	first, err := te.InsertJob(ctx, engine.NewJob{Handler: "h", IdempotencyKey: key("order-1")})
	if err != nil || first.Deduplicated {
		t.Fatal(first, err)
	}
	again, err := te.InsertJob(ctx, engine.NewJob{Handler: "h", IdempotencyKey: key("order-1")})
	if err != nil || !again.Deduplicated || again.ID != first.ID {
		t.Fatalf("repeat while live: %+v %v", again, err)
	}
	te.apply(t, te.claim(t), engine.Outcome{Kind: pg.KindDone, Label: "done"})
	again, err = te.InsertJob(ctx, engine.NewJob{Handler: "h", IdempotencyKey: key("order-1")})
	if err != nil || !again.Deduplicated || again.ID != first.ID || again.Status != "done" {
		t.Fatalf("repeat after finish: %+v %v", again, err)
	}
	batch, err := te.InsertJobs(ctx, []engine.NewJob{{Handler: "h", IdempotencyKey: key("order-1")},
		{Handler: "h", IdempotencyKey: key("order-2")}, {Handler: "h"}, {Handler: "h", IdempotencyKey: key("order-2")}})
	if err != nil {
		t.Fatal(err)
	}
	if !batch[0].Deduplicated || batch[0].ID != first.ID || batch[1].Deduplicated || batch[2].Deduplicated ||
		!batch[3].Deduplicated || batch[3].ID != batch[1].ID || batch[2].ID == batch[1].ID {
		t.Fatalf("batch answers: %+v", batch)
	}
	later := time.Now().Add(2 * time.Hour)
	clock.Store(&later)
	fresh, err := te.InsertJob(ctx, engine.NewJob{Handler: "h", IdempotencyKey: key("order-1")})
	if err != nil || fresh.Deduplicated || fresh.ID == first.ID {
		t.Fatalf("after the window: %+v %v", fresh, err)
	}
	clock.Store(nil)
	// Many goroutines, one key: one job.
	var wg sync.WaitGroup
	ids := make([]int64, 32)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := te.InsertJob(ctx, engine.NewJob{Handler: "h", IdempotencyKey: key("burst")})
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = got.ID
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("concurrent inserts of one key made several jobs: %v", ids)
		}
	}
	// Without a key, an insert is still one statement (the plain one; on Citus its
	// JobInsert, in a transaction, and the wake-up on the coordinator).
	te.counter.Reset()
	te.insert(t, engine.NewJob{})
	got := te.counter.Snapshot()
	switch {
	case pgtest.Citus():
		if got["JobInsert"] != 1 || got["WorkNotify"] != 1 || len(got) != 3 {
			t.Fatalf("an insert without a key ran %v on Citus, want JobInsert and WorkNotify once", got)
		}
	case len(got) != 1 || got["JobInsertPlain"] != 1:
		t.Fatalf("an insert without a key ran %v, want JobInsertPlain once", got)
	}
}
