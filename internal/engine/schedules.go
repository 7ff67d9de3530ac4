package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/robfig/cron/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/gendurable/gendurable/internal/pg"
)

// Overlap policies of a schedule.
const (
	OverlapAllow = "allow" // every tick makes a job
	OverlapSkip  = "skip"  // a tick makes nothing while the schedule's previous job is live
)

// cronParser reads 5-field cron, 6-field cron with seconds first, descriptors (@daily)
// and @every <duration>.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ScheduleSpec is a parsed cron expression in its timezone: it says when ticks fall.
type ScheduleSpec struct {
	sched cron.Schedule
	loc   *time.Location
}

// ParseScheduleSpec parses a cron expression ("*/5 * * * *", "0 */5 * * * *" with
// seconds, "@hourly", "@every 30s") for the IANA timezone tz ("" is UTC).
func ParseScheduleSpec(expr, tz string) (ScheduleSpec, error) {
	if tz == "" {
		tz = "UTC"
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return ScheduleSpec{}, fmt.Errorf("unknown timezone %q (an IANA name such as Europe/Paris)", tz)
	}
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return ScheduleSpec{}, errors.New("give the timezone in the timezone field, not in the expression")
	}
	s, err := cronParser.Parse(expr)
	if err != nil {
		return ScheduleSpec{}, err
	}
	return ScheduleSpec{sched: s, loc: loc}, nil
}

// Next returns the first tick strictly after t. A cron expression follows the wall
// clock of the timezone: each local time it names fires once, so in the repeated hour of
// a fall-back a time already fired is not fired again, and a local time that a
// spring-forward skips fires at the same distance past the gap (02:30 → 03:30 CEST).
// @every counts elapsed time.
func (s ScheduleSpec) Next(t time.Time) time.Time {
	if _, every := s.sched.(cron.ConstantDelaySchedule); every {
		return s.sched.Next(t)
	}
	wall := asWall(t.In(s.loc))
	for range 1000 { // each round moves the wall clock forward; a mapping goes back at most twice
		wall = s.sched.Next(wall)
		if wall.IsZero() {
			return time.Time{}
		}
		if m := fromWall(wall, s.loc); m.After(t) {
			return m
		}
	}
	return time.Time{}
}

// asWall re-expresses t's local wall-clock reading in UTC (a clock without DST).
func asWall(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// fromWall is the instant at which loc's clock reads wall: the first one when it reads
// it twice (fall-back), and past the gap by the gap's length when it never does
// (spring-forward: the offset in force before the gap). time.Date leaves both cases
// unspecified, so the two offsets around wall are tried here.
func fromWall(wall time.Time, loc *time.Location) time.Time {
	_, before := wall.Add(-12 * time.Hour).In(loc).Zone()
	_, after := wall.Add(12 * time.Hour).In(loc).Zone()
	var first time.Time
	for _, off := range []int{before, after} {
		c := wall.Add(-time.Duration(off) * time.Second)
		if asWall(c.In(loc)).Equal(wall) && (first.IsZero() || c.Before(first)) {
			first = c
		}
	}
	if first.IsZero() {
		first = wall.Add(-time.Duration(before) * time.Second)
	}
	return first.In(loc)
}

// Latest returns the most recent tick at or before now, starting from due (a tick at or
// before now): the one tick that runs after downtime, the missed ones are not replayed.
// Its cost follows the ticks near now, not the length of the downtime.
func (s ScheduleSpec) Latest(due, now time.Time) time.Time {
	if every, ok := s.sched.(cron.ConstantDelaySchedule); ok {
		n := now.Sub(due) / every.Delay
		return due.Add(n * every.Delay)
	}
	from := due
	// The smallest window ending at now that holds a tick, doubling: then walk inside it.
	for w := time.Second; now.Sub(due) > w; w *= 2 {
		if t := s.Next(now.Add(-w)); !t.IsZero() && !t.After(now) {
			from = t
			break
		}
	}
	latest := from
	for t := s.Next(from); !t.IsZero() && !t.After(now); t = s.Next(t) {
		latest = t
	}
	return latest
}

// Schedule makes a job from a handler on a cron schedule.
type Schedule struct {
	Name     string
	Cron     string
	Timezone string
	Handler  string
	Queue    string
	Input    json.RawMessage
	Overlap  string
	Paused   bool
	// NextRunAt is the next tick the schedule fires.
	NextRunAt time.Time
	// LastTickAt is the last tick fired (nil: none yet); LastJobID the latest job (0: none).
	LastTickAt           *time.Time
	LastJobID            int64
	CreatedAt, UpdatedAt time.Time
	// TraceContext is the trace context of the request that last wrote the schedule
	// (TraceContextOf's form; nil: none): the span of each tick links to it.
	TraceContext *string
}

func scheduleOf(s pg.Schedule) Schedule {
	return Schedule{Name: s.Name, Cron: s.Cron, Timezone: s.Timezone, Handler: s.Handler, Queue: s.Queue,
		Input: s.Input, Overlap: s.Overlap, Paused: s.Paused, NextRunAt: s.NextRunAt, LastTickAt: s.LastTickAt,
		LastJobID: s.LastJobID, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt, TraceContext: s.TraceContext}
}

// ScheduleSettings is what a client sets on a schedule (PUT /v1/schedules/{name}).
type ScheduleSettings struct {
	Cron     string
	Timezone string // default UTC
	Handler  string
	Queue    string // default "default"
	Input    json.RawMessage
	Overlap  string // default "allow"
	Paused   bool
	// TraceContext is the trace context of the request (TraceContextOf's form; nil:
	// none), kept with the schedule and replaced by each write.
	TraceContext *string
}

// SetSchedule validates and writes a schedule (one statement, which wakes every
// scheduler); a *ValidationError names each bad field (the handler must be registered)
// and nothing is written. now is the time its next tick is computed from.
func (e *Engine) SetSchedule(ctx context.Context, name string, s ScheduleSettings, now time.Time) (Schedule, error) {
	v := &validator{}
	v.name("name", name)
	if s.Timezone == "" {
		s.Timezone = "UTC"
	}
	if s.Queue == "" {
		s.Queue = DefaultQueue
	}
	if s.Overlap == "" {
		s.Overlap = OverlapAllow
	}
	if len(s.Input) == 0 {
		s.Input = json.RawMessage(`{}`)
	}
	var spec ScheduleSpec
	if _, err := time.LoadLocation(s.Timezone); err != nil || strings.TrimSpace(s.Timezone) != s.Timezone {
		v.add("timezone", "unknown timezone %q (an IANA name such as Europe/Paris)", s.Timezone)
	} else if got, err := ParseScheduleSpec(s.Cron, s.Timezone); err != nil {
		v.add("cron", "%s", err.Error())
	} else {
		spec = got
	}
	v.name("handler", s.Handler)
	v.name("queue", s.Queue)
	if s.Overlap != OverlapAllow && s.Overlap != OverlapSkip {
		v.add("overlap", `must be "skip" or "allow"`)
	}
	v.jsonValue("input/", s.Input)
	if err := v.err(); err != nil {
		return Schedule{}, err
	}
	next := spec.Next(now)
	if next.IsZero() {
		return Schedule{}, &ValidationError{Errors: []FieldError{{Field: "cron", Message: "never fires"}}}
	}
	if _, err := e.db.HandlerGet(ctx, s.Handler); errors.Is(err, ErrNotFound) {
		return Schedule{}, &ValidationError{Errors: []FieldError{{Field: "handler",
			Message: fmt.Sprintf("no handler named %q is registered (PUT /v1/handlers/%s first)", s.Handler, s.Handler)}}}
	} else if err != nil {
		return Schedule{}, err
	}
	row, err := e.db.ScheduleUpsert(ctx, pg.ScheduleUpsert{Name: name, Cron: s.Cron, Timezone: s.Timezone,
		Handler: s.Handler, Queue: s.Queue, Input: s.Input, Overlap: s.Overlap, Paused: s.Paused, NextRunAt: next,
		TraceContext: s.TraceContext})
	if err != nil {
		return Schedule{}, err
	}
	return scheduleOf(row), nil
}

// GetSchedule returns one schedule; ErrNotFound when none has the name.
func (e *Engine) GetSchedule(ctx context.Context, name string) (Schedule, error) {
	s, err := e.db.ScheduleGet(ctx, name)
	return scheduleOf(s), err
}

// ListSchedules returns every schedule by name.
func (e *Engine) ListSchedules(ctx context.Context) ([]Schedule, error) {
	rows, err := e.db.ScheduleList(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Schedule, len(rows))
	for i, s := range rows {
		out[i] = scheduleOf(s)
	}
	return out, nil
}

// DeleteSchedule removes a schedule (its jobs stay); ErrNotFound when none has the name.
func (e *Engine) DeleteSchedule(ctx context.Context, name string) error {
	return e.db.ScheduleDelete(ctx, name)
}

// SchedulerConfig tunes the Scheduler.
type SchedulerConfig struct {
	// Batch is the most schedules one pass reads (default 100); a pass whose batch is all
	// due runs again at once.
	Batch int
	// MaxSleep bounds the sleep between passes when nothing is due (default 1m): a net
	// under lost notifications and clock jumps. Changes wake the scheduler at once.
	MaxSleep time.Duration
	// Now is the scheduler's clock (default time.Now). Tests pin it and call RunDue.
	Now func() time.Time
	// TracerProvider, when set, makes a span of each tick (tickSpan); nil (the default):
	// tracing is off and a tick's job has no trace context.
	TracerProvider trace.TracerProvider
}

// SchedulerStats counts what one pass did.
type SchedulerStats struct {
	Fired   int // jobs made
	Skipped int // ticks fired without a job: overlap "skip" with the previous run live
	Lost    int // due ticks another process fired first
	// Next is the earliest tick still to come (zero: no running schedule).
	Next time.Time
}

// Scheduler fires the due ticks of every schedule: one statement per pass to read the
// earliest due ticks, one per due tick to fire it (a compare-and-set that makes the job:
// of any number of processes, one wins each tick). Between passes it sleeps until the
// next due tick, or until a schedule changes (NOTIFY), so an idle scheduler costs one
// statement per MaxSleep and nothing per step.
type Scheduler struct {
	engine *Engine
	cfg    SchedulerConfig
	log    *slog.Logger
	tracer trace.Tracer // nil: tracing off
	wake   chan struct{}
	// OnPass, when set, is called after each pass of the running service (tests wait on it).
	OnPass func(SchedulerStats, error)
	cancel context.CancelFunc
	done   sync.WaitGroup
}

// Validate reports the settings NewScheduler refuses.
func (c SchedulerConfig) Validate() error {
	v := ConfigCheck{Service: "scheduler"}
	v.Check(c.Batch >= 0, "Batch", "", c.Batch, "must not be negative (0: the default, 100)")
	v.Check(c.MaxSleep >= 0, "MaxSleep", "", c.MaxSleep, "must not be negative (0: the default, 1m)")
	return v.Err()
}

// NewScheduler returns a stopped scheduler; it panics when cfg.Validate refuses a setting.
func (e *Engine) NewScheduler(cfg SchedulerConfig) *Scheduler {
	mustBeValid(cfg.Validate())
	if cfg.Batch == 0 {
		cfg.Batch = 100
	}
	if cfg.MaxSleep == 0 {
		cfg.MaxSleep = time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Scheduler{engine: e, cfg: cfg, log: e.log.With("service", "scheduler"), wake: make(chan struct{}, 1)}
	if cfg.TracerProvider != nil {
		s.tracer = cfg.TracerProvider.Tracer("github.com/gendurable/gendurable/internal/engine")
	}
	return s
}

// ScheduleCatchUp is how late a schedule's tick may be and still fire. A pass that comes
// less than this after a due tick (a stalled process, a busy machine, a database
// failover) fires each tick it missed, in order; one that comes later (a downtime) fires
// only the most recent tick and replays none of the others. Quartz's misfire threshold,
// with the same default.
const ScheduleCatchUp = time.Minute

// RunDue fires every tick due at the scheduler's clock, batch by batch, until no
// schedule is due (tickToFire says which ticks run after a late pass).
func (s *Scheduler) RunDue(ctx context.Context) (SchedulerStats, error) {
	var st SchedulerStats
	for {
		now := s.cfg.Now()
		due, err := s.engine.db.ScheduleListDue(ctx, now, s.cfg.Batch)
		if err != nil {
			return st, err
		}
		st.Next = time.Time{}
		fired := 0
		for _, d := range due {
			if d.NextRunAt.After(now) {
				st.Next = earliest(st.Next, d.NextRunAt)
				break
			}
			fired++
			next, err := s.fire(ctx, d, now, &st)
			if err != nil {
				return st, err
			}
			st.Next = earliest(st.Next, next)
		}
		// A batch that was all due, or a tick fired behind whose next is due too (the
		// catch-up): pass again at once. Each fire moves its schedule's next_run_at
		// forward (here or in the process that won it), so this ends.
		if fired < s.cfg.Batch && (st.Next.IsZero() || st.Next.After(now)) {
			return st, nil
		}
	}
}

// tickToFire is the tick a pass at now fires for a schedule due at due: due itself when
// it is less than ScheduleCatchUp old, else the most recent tick at or before now.
func tickToFire(spec ScheduleSpec, due, now time.Time) time.Time {
	if now.Sub(due) < ScheduleCatchUp {
		return due
	}
	return spec.Latest(due, now)
}

// fire fires one due schedule and returns its next tick (zero when it has none).
func (s *Scheduler) fire(ctx context.Context, d pg.ScheduleDue, now time.Time, st *SchedulerStats) (time.Time, error) {
	spec, err := ParseScheduleSpec(d.Cron, d.Timezone)
	if err != nil { // validated on the way in; an expression an older build accepted
		s.log.Error("schedule cannot be parsed; not fired", "schedule", d.Name, "err", err)
		return time.Time{}, nil
	}
	tick := tickToFire(spec, d.NextRunAt, now)
	next := spec.Next(tick)
	if next.IsZero() {
		next = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	span, tc := s.tickSpan(d, tick)
	r, err := s.engine.db.ScheduleFire(ctx, pg.ScheduleFire{Name: d.Name, DueAt: d.NextRunAt, Tick: tick, NextRunAt: next,
		TraceContext: tc})
	outcome := ""
	switch {
	case errors.Is(err, ErrNotFound):
		st.Lost++
		outcome = "lost"
	case err != nil:
		endTickSpan(span, "error", 0, err)
		return time.Time{}, err
	case r.JobID != 0:
		st.Fired++
		outcome = "fired"
	case r.Skipped:
		st.Skipped++
		outcome = "skipped"
	case !r.HandlerKnown:
		s.log.Warn("schedule names a handler that is not registered; tick fired without a job", "schedule", d.Name, "tick", tick)
		outcome = "no_handler"
	}
	if outcome != "lost" && outcome != "" {
		s.countTick(d.Name, outcome)
	}
	endTickSpan(span, outcome, r.JobID, nil)
	return next, nil
}

// spanTick is the name of a tick's span.
const spanTick = "gendurable.schedule.tick"

// tickSpan starts the span of a schedule's tick and answers it with the trace context
// its job keeps; nil and nil when tracing is off (nothing is invented: the job has no
// trace context). The span is the root of a new trace, linked to the trace context kept
// with the schedule (the request that last wrote it): a schedule that runs for a year
// makes a trace a tick, not one trace of a year (docs/observability.md, "Schedules").
func (s *Scheduler) tickSpan(d pg.ScheduleDue, tick time.Time) (trace.Span, *string) {
	if s.tracer == nil {
		return nil, nil
	}
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("gendurable.schedule", d.Name),
			attribute.String("gendurable.schedule.tick", tick.UTC().Format(time.RFC3339Nano)))}
	if d.TraceContext != nil {
		if sc := SpanContextOf(*d.TraceContext); sc.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		}
	}
	_, span := s.tracer.Start(context.Background(), spanTick, opts...)
	tc := TraceContextOfSpan(span.SpanContext())
	return span, &tc
}

// endTickSpan ends a tick's span with what the tick did: fired (job id), skipped, lost
// (another process fired it), no_handler or error.
func endTickSpan(span trace.Span, outcome string, jobID int64, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.String("gendurable.schedule.outcome", outcome))
	if jobID != 0 {
		span.SetAttributes(attribute.Int64("gendurable.job.id", jobID))
	}
	switch {
	case err != nil:
		span.SetStatus(codes.Error, err.Error())
	case outcome == "no_handler":
		span.SetStatus(codes.Error, "the schedule's handler is not registered")
	}
	span.End()
}

// countTick counts a tick this process fired in gendurable_schedule_ticks_total.
func (s *Scheduler) countTick(schedule, outcome string) {
	if m := s.engine.metrics; m != nil {
		m.ScheduleTicks.WithLabelValues(schedule, outcome).Inc()
	}
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// Start runs passes until Stop: at start, at each next due tick, on each schedule
// change (LISTEN gendurable_schedules), and at least every MaxSleep.
func (s *Scheduler) Start(ctx context.Context) {
	ctx, s.cancel = context.WithCancel(ctx)
	s.done.Add(2)
	go func() {
		defer s.done.Done()
		s.engine.db.Listen(ctx, pg.SchedulesChannel, func(string) { s.Wake() }, func(err error) {
			s.log.Warn("schedule notifications lost; reconnecting", "err", err)
		})
	}()
	go func() {
		defer s.done.Done()
		for ctx.Err() == nil {
			st, err := s.RunDue(ctx)
			if err != nil && ctx.Err() == nil {
				s.log.Error("scheduler pass failed", "err", err)
			}
			if s.OnPass != nil {
				s.OnPass(st, err)
			}
			sleep := s.cfg.MaxSleep
			if err != nil {
				sleep = time.Second
			} else if !st.Next.IsZero() {
				sleep = min(sleep, max(st.Next.Sub(s.cfg.Now()), time.Millisecond))
			}
			t := time.NewTimer(sleep)
			select {
			case <-ctx.Done():
			case <-s.wake:
			case <-t.C:
			}
			t.Stop()
		}
	}()
}

// Wake makes the running scheduler pass at once (a schedule changed).
func (s *Scheduler) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Stop ends the scheduler and waits for its pass in progress.
func (s *Scheduler) Stop() {
	if s.cancel != nil {
		s.cancel()
		s.done.Wait()
	}
}

// RunScheduleNow makes schedule name's job now, outside its cron ("run now" on the
// dashboard): a tick at the database's clock, through the scheduler's own statement, so
// the job is the schedule's (listed with its runs) and the schedule keeps its next tick.
// A paused schedule, or one whose last run is live while its overlap is "skip", is
// ErrConflict; a handler that is not registered is a ValidationError naming handler;
// neither writes anything. The job keeps traceContext (the caller's: "run now" continues
// the request's trace; nil: none).
func (e *Engine) RunScheduleNow(ctx context.Context, name string, traceContext *string) (JobDetail, error) {
	for range 3 { // a tick the scheduler fires meanwhile moves next_run_at: read it again
		s, err := e.db.ScheduleGet(ctx, name)
		if err != nil {
			return JobDetail{}, err
		}
		if s.Paused {
			return JobDetail{}, fmt.Errorf("%w: schedule %s is paused: resume it to run it", ErrConflict, name)
		}
		if _, err := e.db.HandlerGet(ctx, s.Handler); errors.Is(err, ErrNotFound) {
			v := &validator{}
			v.add("handler", "schedule %s names handler %q, which is not registered", name, s.Handler)
			return JobDetail{}, v.err()
		} else if err != nil {
			return JobDetail{}, err
		}
		if s.Overlap == "skip" {
			latest, err := e.db.JobList(ctx, pg.JobListParams{Schedule: &name, Limit: 1})
			if err != nil {
				return JobDetail{}, err
			}
			if len(latest) == 1 && !finished(latest[0].Status) {
				return JobDetail{}, fmt.Errorf("%w: schedule %s's last run (job %d) is %s and its overlap is \"skip\"",
					ErrConflict, name, latest[0].ID, latest[0].Status)
			}
		}
		now, err := e.db.DatabaseNow(ctx)
		if err != nil {
			return JobDetail{}, err
		}
		r, err := e.db.ScheduleFire(ctx, pg.ScheduleFire{Name: name, DueAt: s.NextRunAt, Tick: now, NextRunAt: s.NextRunAt,
			TraceContext: traceContext})
		switch {
		case errors.Is(err, ErrNotFound):
			continue
		case err != nil:
			return JobDetail{}, err
		case r.Skipped:
			return JobDetail{}, fmt.Errorf("%w: schedule %s's last run is live and its overlap is \"skip\"", ErrConflict, name)
		case r.JobID == 0:
			return JobDetail{}, fmt.Errorf("%w: schedule %s made no job (its handler %q is not registered)", ErrInvalid, name, s.Handler)
		}
		return e.GetJob(ctx, r.JobID)
	}
	return JobDetail{}, fmt.Errorf("%w: schedule %s fired meanwhile three times: try again", ErrConflict, name)
}
