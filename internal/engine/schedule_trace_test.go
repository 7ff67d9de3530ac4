package engine_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/pg"
)

const (
	scheduleTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	callerTraceparent   = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
)

// A schedule keeps the trace context it was written with. With tracing off its ticks'
// jobs get none (nothing is invented, and a long-lived schedule does not make one endless
// trace); with tracing on each tick is the root span of a new trace, linked to the
// schedule's context, and its job continues that span. "Run now" continues the caller's
// trace. A write without a trace context clears the schedule's.
func TestScheduleTicksStartTracesLinkedToTheirSchedule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	kept := scheduleTraceparent + " vendor=abc"
	s, err := te.SetSchedule(ctx, "tick", engine.ScheduleSettings{Cron: "*/10 * * * * *", Handler: "h", TraceContext: &kept}, start)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := te.GetSchedule(ctx, "tick"); err != nil || s.TraceContext == nil || *s.TraceContext != kept ||
		got.TraceContext == nil || *got.TraceContext != kept {
		t.Fatalf("the schedule's trace context: answered %v, stored %v (%v), want %q", s.TraceContext, got.TraceContext, err, kept)
	}
	jobOfTick := func(tick time.Time) pg.Job {
		t.Helper()
		name := "tick"
		jobs, err := te.db.JobList(ctx, pg.JobListParams{Schedule: &name, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs {
			if j.ScheduleTick != nil && j.ScheduleTick.Equal(tick) {
				return j
			}
		}
		t.Fatalf("no job for tick %s among %d", tick, len(jobs))
		return pg.Job{}
	}

	// Tracing off.
	clock := start.Add(10 * time.Second)
	off := te.NewScheduler(engine.SchedulerConfig{Now: func() time.Time { return clock }})
	if st, err := off.RunDue(ctx); err != nil || st.Fired != 1 {
		t.Fatalf("tracing off: %+v %v", st, err)
	}
	if j := jobOfTick(clock); j.TraceContext != nil {
		t.Fatalf("tracing off: the tick's job has a trace context %q", *j.TraceContext)
	}

	// Tracing on.
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	clock = start.Add(20 * time.Second)
	on := te.NewScheduler(engine.SchedulerConfig{Now: func() time.Time { return clock }, TracerProvider: tp})
	if st, err := on.RunDue(ctx); err != nil || st.Fired != 1 {
		t.Fatalf("tracing on: %+v %v", st, err)
	}
	j := jobOfTick(clock)
	ended := rec.Ended()
	if len(ended) != 1 || ended[0].Name() != "gendurable.schedule.tick" {
		t.Fatalf("spans ended: %v", ended)
	}
	span := ended[0]
	sc := span.SpanContext()
	if j.TraceContext == nil || *j.TraceContext != engine.TraceContextOfSpan(sc) {
		t.Fatalf("the tick's job keeps %v, want the tick span's %q", j.TraceContext, engine.TraceContextOfSpan(sc))
	}
	if span.Parent().IsValid() || sc.TraceID().String() == "4bf92f3577b34da6a3ce929d0e0e4736" || span.SpanKind() != trace.SpanKindProducer {
		t.Fatalf("the tick's span is not the producer root of a new trace: parent %v, trace %s, kind %v", span.Parent(), sc.TraceID(), span.SpanKind())
	}
	if links := span.Links(); len(links) != 1 || links[0].SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" ||
		links[0].SpanContext.SpanID().String() != "00f067aa0ba902b7" || links[0].SpanContext.TraceState().String() != "vendor=abc" {
		t.Fatalf("the tick's span links %+v, want the schedule's context", links)
	}
	attrs := map[string]string{}
	for _, a := range span.Attributes() {
		attrs[string(a.Key)] = a.Value.String()
	}
	if attrs["gendurable.schedule"] != "tick" || attrs["gendurable.schedule.outcome"] != "fired" ||
		attrs["gendurable.job.id"] != strconv.FormatInt(j.ID, 10) || attrs["gendurable.schedule.tick"] != clock.Format(time.RFC3339Nano) {
		t.Fatalf("the tick's span attributes: %v (job %d)", attrs, j.ID)
	}

	// Run now, in the caller's trace.
	caller := callerTraceparent
	now, err := te.RunScheduleNow(ctx, "tick", &caller)
	if err != nil {
		t.Fatal(err)
	}
	if now.TraceContext == nil || *now.TraceContext != caller {
		t.Fatalf("the job run now keeps %v, want the caller's %q", now.TraceContext, caller)
	}

	// A write without a trace context: the schedule has none, and its ticks' spans no link.
	if s, err := te.SetSchedule(ctx, "tick", engine.ScheduleSettings{Cron: "*/10 * * * * *", Handler: "h"}, clock); err != nil || s.TraceContext != nil {
		t.Fatalf("after a write without a trace context: %v (%v)", s.TraceContext, err)
	}
	clock = start.Add(30 * time.Second)
	if st, err := on.RunDue(ctx); err != nil || st.Fired != 1 {
		t.Fatalf("tracing on, no schedule context: %+v %v", st, err)
	}
	if ended := rec.Ended(); len(ended) != 2 || len(ended[1].Links()) != 0 || ended[1].Parent().IsValid() {
		t.Fatalf("a tick of a schedule without a trace context: %v", ended)
	}
}

// A signal keeps its sender's trace context; the step it wakes is shown it with that
// context (the dispatcher links the attempt's span to it), read by the inbox load the
// claim makes anyway.
func TestASignalsTraceContextReachesTheStepItWakes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	te := newTestEngine(t, engine.Config{})
	own := scheduleTraceparent
	id := te.insert(t, engine.NewJob{TraceContext: &own})
	te.apply(t, te.claim(t), await("go"))
	sender := callerTraceparent + " vendor=abc"
	sent, err := te.Signal(ctx, engine.SignalTarget{JobID: &id, TraceContext: &sender}, "go", nil)
	if err != nil || !sent.Woke {
		t.Fatalf("signal: %+v %v", sent, err)
	}
	te.signal(t, id, "untraced") // a second one, without a context: the job stays runnable
	st := te.claim(t)
	if len(st.Signals) != 2 || st.Signals[0].TraceContext == nil || *st.Signals[0].TraceContext != sender ||
		st.Signals[1].TraceContext != nil {
		t.Fatalf("the woken step's signals: %+v", st.Signals)
	}
	if j := te.job(t, id); j.TraceContext == nil || *j.TraceContext != own {
		t.Fatalf("the job's own trace context changed to %v", j.TraceContext)
	}
}
