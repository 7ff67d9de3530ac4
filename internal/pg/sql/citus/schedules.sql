-- ScheduleFire (sql/schedules.sql) on Citus, in one transaction: ScheduleAdvance on the
-- schedules reference table (the compare-and-set that lets one process fire a tick),
-- ScheduleLatestLive at the schedule's placement (PlacementOfKey of its name: every job
-- of a schedule lives there, so jobs_schedule_tick is exact), then JobInsert of its job.

-- name: ScheduleAdvance :one
-- Moves a due schedule from due_at to next_run_at; no row when another process fired the
-- tick first, or the schedule was changed, paused or deleted. Index use: schedules_pkey.
UPDATE schedules s
SET next_run_at = sqlc.arg(next_run_at)::timestamptz, last_tick_at = sqlc.arg(tick)::timestamptz, updated_at = now()
WHERE s.name = sqlc.arg(name)::text AND s.next_run_at = sqlc.arg(due_at)::timestamptz AND NOT s.paused
RETURNING s.name, s.handler, s.queue, s.input, s.overlap;

-- name: ScheduleLatestLive :one
-- Whether the schedule's latest job is live (runnable, executing or awaiting): a router
-- statement at the schedule's placement. Index use: jobs_schedule_tick, one entry, backwards.
SELECT coalesce((SELECT j.status FROM jobs j
                 WHERE j.placement = sqlc.arg(placement)::int AND j.schedule_name = sqlc.arg(name)::text
                 ORDER BY j.schedule_tick DESC LIMIT 1), 'gone') IN ('runnable', 'executing', 'awaiting') AS live;

-- name: ScheduleUpsertRow :one
-- ScheduleUpsert (sql/schedules.sql) without what Citus cannot run beside a write of a
-- reference table: the latest job (ScheduleLastJob, at the schedule's placement) and the
-- NOTIFY (SchedulesNotify, on the coordinator). Index use: schedules_pkey.
INSERT INTO schedules AS s (name, cron, timezone, handler, queue, input, overlap, paused, next_run_at, trace_context)
VALUES (sqlc.arg(name), sqlc.arg(cron), sqlc.arg(timezone), sqlc.arg(handler), sqlc.arg(queue),
        sqlc.arg(input), sqlc.arg(overlap), sqlc.arg(paused), sqlc.arg(next_run_at), sqlc.narg(trace_context)::text)
ON CONFLICT (name) DO UPDATE
SET cron = excluded.cron, timezone = excluded.timezone, handler = excluded.handler,
    queue = excluded.queue, input = excluded.input, overlap = excluded.overlap, paused = excluded.paused,
    trace_context = excluded.trace_context,
    next_run_at = CASE WHEN s.cron = excluded.cron AND s.timezone = excluded.timezone AND NOT s.paused
                       THEN s.next_run_at ELSE excluded.next_run_at END,
    updated_at = excluded.updated_at
RETURNING s.name, s.cron, s.timezone, s.handler, s.queue, s.input, s.overlap, s.paused, s.next_run_at,
          s.last_tick_at, s.created_at, s.updated_at, s.trace_context;

-- name: ScheduleGetRow :one
-- One schedule (a reference table, read on the coordinator). Index use: schedules_pkey.
SELECT s.name, s.cron, s.timezone, s.handler, s.queue, s.input, s.overlap, s.paused, s.next_run_at,
       s.last_tick_at, s.created_at, s.updated_at, s.trace_context
FROM schedules s
WHERE s.name = sqlc.arg(name);

-- name: ScheduleListRows :many
-- Every schedule by name (a reference table, read on the coordinator).
SELECT s.name, s.cron, s.timezone, s.handler, s.queue, s.input, s.overlap, s.paused, s.next_run_at,
       s.last_tick_at, s.created_at, s.updated_at, s.trace_context
FROM schedules s
ORDER BY s.name;

-- name: ScheduleDeleteRow :one
-- Removes a schedule (its jobs stay, still naming it); the caller notifies the schedulers.
DELETE FROM schedules WHERE name = sqlc.arg(name) RETURNING name;

-- name: ScheduleLastJob :one
-- The id of the schedule's latest job (0: none yet): a router statement at the schedule's
-- placement. Index use: jobs_schedule_tick, one entry, backwards.
SELECT coalesce((SELECT j.id FROM jobs j
                 WHERE j.placement = sqlc.arg(placement)::int AND j.schedule_name = sqlc.arg(name)::text
                 ORDER BY j.schedule_tick DESC LIMIT 1), 0)::bigint AS last_job_id;

-- name: SchedulesNotify :exec
-- Wakes every scheduler for a schedule created, changed or deleted: on the coordinator,
-- where they LISTEN.
SELECT pg_notify('gendurable_schedules', sqlc.arg(name)::text);
