package pg

import (
	"context"
	"encoding/json"
	"time"

	"github.com/gendurable/gendurable/internal/pg/dbsqlc"
)

// SchedulesChannel is the NOTIFY channel that carries a schedule's name when it is
// created, changed or deleted (the schedulers re-read their next wake-up).
const SchedulesChannel = "gendurable_schedules"

// Schedule is one row of schedules, with the id of its latest job (0: none yet). Its
// fields are in the order of the statements' rows, which convert to it.
type Schedule struct {
	Name       string
	Cron       string
	Timezone   string
	Handler    string
	Queue      string
	Input      json.RawMessage
	Overlap    string // "skip" or "allow"
	Paused     bool
	NextRunAt  time.Time
	LastTickAt *time.Time
	CreatedAt  time.Time
	UpdatedAt  time.Time
	// TraceContext is the trace context of the request that last wrote the schedule
	// (jobs.trace_context's form; nil: none): each tick's span links to it.
	TraceContext *string
	LastJobID    int64
}

// ScheduleUpsert is a schedule to write; NextRunAt is its next tick after now (kept
// when the cron, timezone and running state are unchanged).
type ScheduleUpsert struct {
	Name, Cron, Timezone, Handler, Queue string
	Input                                json.RawMessage
	Overlap                              string
	Paused                               bool
	NextRunAt                            time.Time
	TraceContext                         *string // the request's (nil: none)
}

// ScheduleUpsert creates or changes a schedule and notifies the schedulers.
func (db *DB) ScheduleUpsert(ctx context.Context, p ScheduleUpsert) (Schedule, error) {
	if db.citus != nil {
		return db.citusScheduleUpsert(ctx, p)
	}
	r, err := db.q.ScheduleUpsert(ctx, dbsqlc.ScheduleUpsertParams{Name: p.Name, Cron: p.Cron, Timezone: p.Timezone,
		Handler: p.Handler, Queue: p.Queue, Input: p.Input, Overlap: p.Overlap, Paused: p.Paused, NextRunAt: p.NextRunAt,
		TraceContext: p.TraceContext})
	return Schedule(r), translate(err)
}

// ScheduleGet returns one schedule.
func (db *DB) ScheduleGet(ctx context.Context, name string) (Schedule, error) {
	if db.citus != nil {
		return db.citusScheduleGet(ctx, name)
	}
	r, err := db.q.ScheduleGet(ctx, name)
	return Schedule(r), translate(err)
}

// ScheduleList returns every schedule by name.
func (db *DB) ScheduleList(ctx context.Context) ([]Schedule, error) {
	if db.citus != nil {
		return db.citusScheduleList(ctx)
	}
	rows, err := db.q.ScheduleList(ctx)
	return convertAll(rows, func(r dbsqlc.ScheduleListRow) Schedule { return Schedule(r) }), translate(err)
}

// ScheduleDelete removes a schedule (ErrNotFound when there is none) and notifies the schedulers.
func (db *DB) ScheduleDelete(ctx context.Context, name string) error {
	if db.citus != nil {
		return db.citusScheduleDelete(ctx, name)
	}
	_, err := db.q.ScheduleDelete(ctx, name)
	return translate(err)
}

// ScheduleDue is a running schedule's due tick, as the scheduler reads it.
type ScheduleDue struct {
	Name, Cron, Timezone string
	NextRunAt            time.Time
	TraceContext         *string // the schedule's (nil: none)
}

// ScheduleListDue returns up to limit running schedules due at asOf, earliest due tick
// first, then the first running schedule not yet due (if any).
func (db *DB) ScheduleListDue(ctx context.Context, asOf time.Time, limit int) ([]ScheduleDue, error) {
	rows, err := db.q.ScheduleListDue(ctx, dbsqlc.ScheduleListDueParams{AsOf: asOf, MaxRows: limit})
	return convertAll(rows, func(r dbsqlc.ScheduleListDueRow) ScheduleDue { return ScheduleDue(r) }), translate(err)
}

// ScheduleFire is one due tick to fire: the schedule moves from DueAt to NextRunAt and
// its job is made for Tick (the most recent tick at or before now, DueAt or later).
type ScheduleFire struct {
	Name        string
	DueAt, Tick time.Time
	NextRunAt   time.Time
	// TraceContext is the trace context the job keeps (nil: none): the tick's span, or
	// the caller's of "run now".
	TraceContext *string
}

// ScheduleFired says what firing a tick did.
type ScheduleFired struct {
	JobID        int64 // the job made (0: none)
	Skipped      bool  // overlap "skip" and the previous run still live
	HandlerKnown bool  // false: the schedule names a handler that is not registered
}

// ScheduleFire fires one tick (one statement); ErrNotFound when another process fired
// it first, or the schedule was changed, paused or deleted meanwhile.
func (db *DB) ScheduleFire(ctx context.Context, f ScheduleFire) (ScheduleFired, error) {
	if db.citus != nil {
		return db.citusScheduleFire(ctx, f)
	}
	r, err := db.q.ScheduleFire(ctx, dbsqlc.ScheduleFireParams{Name: f.Name, DueAt: f.DueAt, Tick: f.Tick, NextRunAt: f.NextRunAt,
		TraceContext: f.TraceContext})
	return ScheduleFired{JobID: r.JobID, Skipped: r.Skipped, HandlerKnown: r.HandlerKnown}, translate(err)
}
