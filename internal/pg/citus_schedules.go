package pg

import (
	"context"

	"github.com/gendurable/gendurable/internal/pg/dbcitus"
	"github.com/jackc/pgx/v5"
)

// The schedules on Citus (sql/citus/schedules.sql): the schedules table is a reference
// table, read on the coordinator; a schedule's jobs live at the placement of its name
// (PlacementOfKey), where its latest job is found by a router statement; the schedulers
// are woken on the coordinator, where they LISTEN.

// citusSchedule is a schedules row with the id of its latest job.
func citusSchedule(r dbcitus.Schedule, lastJobID int64) Schedule {
	return Schedule{Name: r.Name, Cron: r.Cron, Timezone: r.Timezone, Handler: r.Handler, Queue: r.Queue,
		Input: r.Input, Overlap: r.Overlap, Paused: r.Paused, NextRunAt: r.NextRunAt, LastTickAt: r.LastTickAt,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, TraceContext: r.TraceContext, LastJobID: lastJobID}
}

// citusScheduleUpsert writes the schedule, then wakes the schedulers and reads its latest job.
func (db *DB) citusScheduleUpsert(ctx context.Context, p ScheduleUpsert) (Schedule, error) {
	q := dbcitus.New(db.pool)
	r, err := q.ScheduleUpsertRow(ctx, dbcitus.ScheduleUpsertRowParams{Name: p.Name, Cron: p.Cron, Timezone: p.Timezone,
		Handler: p.Handler, Queue: p.Queue, Input: p.Input, Overlap: p.Overlap, Paused: p.Paused, NextRunAt: p.NextRunAt,
		TraceContext: p.TraceContext})
	if err != nil {
		return Schedule{}, translate(err)
	}
	if err := q.SchedulesNotify(ctx, p.Name); err != nil {
		return Schedule{}, translate(err)
	}
	last, err := q.ScheduleLastJob(ctx, dbcitus.ScheduleLastJobParams{Placement: PlacementOfKey(p.Name), Name: p.Name})
	return citusSchedule(r, last), translate(err)
}

// citusScheduleGet reads one schedule and its latest job.
func (db *DB) citusScheduleGet(ctx context.Context, name string) (Schedule, error) {
	q := dbcitus.New(db.pool)
	r, err := q.ScheduleGetRow(ctx, name)
	if err != nil {
		return Schedule{}, translate(err)
	}
	last, err := q.ScheduleLastJob(ctx, dbcitus.ScheduleLastJobParams{Placement: PlacementOfKey(name), Name: name})
	return citusSchedule(r, last), translate(err)
}

// citusScheduleList reads every schedule, then their latest jobs: a router statement per
// schedule, sent together in one round trip.
func (db *DB) citusScheduleList(ctx context.Context) ([]Schedule, error) {
	rows, err := dbcitus.New(db.pool).ScheduleListRows(ctx)
	if err != nil || len(rows) == 0 {
		return nil, translate(err)
	}
	batch := &pgx.Batch{}
	for _, r := range rows {
		batch.Queue(dbcitus.ScheduleLastJob, PlacementOfKey(r.Name), r.Name)
	}
	results := db.pool.SendBatch(ctx, batch)
	defer func() { _ = results.Close() }()
	out := make([]Schedule, len(rows))
	for i, r := range rows {
		var last int64
		if err := results.QueryRow().Scan(&last); err != nil {
			return nil, translate(err)
		}
		out[i] = citusSchedule(r, last)
	}
	return out, translate(results.Close())
}

// citusScheduleDelete removes the schedule, then wakes the schedulers.
func (db *DB) citusScheduleDelete(ctx context.Context, name string) error {
	q := dbcitus.New(db.pool)
	if _, err := q.ScheduleDeleteRow(ctx, name); err != nil {
		return translate(err)
	}
	return translate(q.SchedulesNotify(ctx, name))
}
