package httpapi

import (
	"context"
	"encoding/json"
	"time"

	"github.com/gendurable/gendurable/internal/engine"
)

func scheduleBody(s engine.Schedule) Schedule {
	out := Schedule{Name: s.Name, Cron: s.Cron, Timezone: s.Timezone, Handler: s.Handler, Queue: s.Queue,
		Input: s.Input, Overlap: ScheduleOverlap(s.Overlap), Paused: s.Paused, NextRunAt: s.NextRunAt,
		LastTickAt: s.LastTickAt, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
	if s.LastJobID != 0 {
		out.LastJobId = &s.LastJobID
	}
	if out.Input == nil {
		out.Input = json.RawMessage("null")
	}
	if s.TraceContext != nil {
		parent, state := engine.SplitTraceContext(*s.TraceContext)
		out.Traceparent = &parent
		if state != "" {
			out.Tracestate = &state
		}
	}
	return out
}

// PutSchedule creates or changes a schedule; the engine validates it (cron, timezone,
// registered handler) and computes its next tick from now. The request's trace context
// is kept with it (jobTraceContext).
func (s *Server) PutSchedule(ctx context.Context, req PutScheduleRequestObject) (PutScheduleResponseObject, error) {
	b := req.Body
	set := engine.ScheduleSettings{Cron: b.Cron, Handler: b.Handler,
		TraceContext: jobTraceContext(ctx, req.Params.Traceparent, req.Params.Tracestate)}
	if b.Timezone != nil {
		set.Timezone = *b.Timezone
	}
	if b.Queue != nil {
		set.Queue = *b.Queue
	}
	if b.Input != nil {
		set.Input = *b.Input
	}
	if b.Overlap != nil {
		set.Overlap = string(*b.Overlap)
	}
	if b.Paused != nil {
		set.Paused = *b.Paused
	}
	got, err := s.eng.SetSchedule(ctx, req.Name, set, time.Now())
	if err != nil {
		return nil, err
	}
	return PutSchedule200JSONResponse(scheduleBody(got)), nil
}

// GetSchedule returns one schedule.
func (s *Server) GetSchedule(ctx context.Context, req GetScheduleRequestObject) (GetScheduleResponseObject, error) {
	got, err := s.eng.GetSchedule(ctx, req.Name)
	if err != nil {
		return nil, missing(err, "schedule", req.Name)
	}
	return GetSchedule200JSONResponse(scheduleBody(got)), nil
}

// ListSchedules lists every schedule by name.
func (s *Server) ListSchedules(ctx context.Context, _ ListSchedulesRequestObject) (ListSchedulesResponseObject, error) {
	all, err := s.eng.ListSchedules(ctx)
	if err != nil {
		return nil, err
	}
	out := ScheduleList{Schedules: make([]Schedule, len(all))}
	for i, sc := range all {
		out.Schedules[i] = scheduleBody(sc)
	}
	return ListSchedules200JSONResponse(out), nil
}

// DeleteSchedule removes a schedule; its jobs stay.
func (s *Server) DeleteSchedule(ctx context.Context, req DeleteScheduleRequestObject) (DeleteScheduleResponseObject, error) {
	if err := s.eng.DeleteSchedule(ctx, req.Name); err != nil {
		return nil, missing(err, "schedule", req.Name)
	}
	return DeleteSchedule204Response{}, nil
}

// RunSchedule makes a schedule's job now, outside its cron, in the caller's trace.
func (s *Server) RunSchedule(ctx context.Context, req RunScheduleRequestObject) (RunScheduleResponseObject, error) {
	d, err := s.eng.RunScheduleNow(ctx, req.Name, jobTraceContext(ctx, req.Params.Traceparent, req.Params.Tracestate))
	if err != nil {
		return nil, missing(err, "schedule", req.Name)
	}
	return RunSchedule201JSONResponse(jobBody(&d.Job)), nil
}
