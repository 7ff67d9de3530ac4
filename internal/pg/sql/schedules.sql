-- name: ScheduleUpsert :one
-- Creates or changes a schedule and wakes every scheduler (NOTIFY gendurable_schedules).
-- next_run_at is the caller's next tick after now; an update that keeps the cron, the
-- timezone and a running schedule keeps the tick already due (a PUT of the same settings
-- does not push it back). trace_context is the request's (NULL: none), replaced by each
-- write. Index use: schedules_pkey.
WITH upserted AS (
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
    RETURNING s.*
),
notified AS (
    SELECT count(pg_notify('gendurable_schedules', u.name)) AS n FROM upserted u
)
SELECT u.name, u.cron, u.timezone, u.handler, u.queue, u.input, u.overlap, u.paused, u.next_run_at,
       u.last_tick_at, u.created_at, u.updated_at, u.trace_context,
       coalesce((SELECT j.id FROM jobs j WHERE j.schedule_name = u.name ORDER BY j.schedule_tick DESC LIMIT 1), 0)::bigint AS last_job_id
FROM upserted u, notified;

-- name: ScheduleGet :one
-- One schedule with the id of its latest job (0: none yet) (jobs_schedule_tick, one entry read backwards).
SELECT s.name, s.cron, s.timezone, s.handler, s.queue, s.input, s.overlap, s.paused, s.next_run_at,
       s.last_tick_at, s.created_at, s.updated_at, s.trace_context,
       coalesce((SELECT j.id FROM jobs j WHERE j.schedule_name = s.name ORDER BY j.schedule_tick DESC LIMIT 1), 0)::bigint AS last_job_id
FROM schedules s
WHERE s.name = sqlc.arg(name);

-- name: ScheduleList :many
-- Every schedule by name, each with the id of its latest job (one jobs_schedule_tick probe each).
SELECT s.name, s.cron, s.timezone, s.handler, s.queue, s.input, s.overlap, s.paused, s.next_run_at,
       s.last_tick_at, s.created_at, s.updated_at, s.trace_context,
       coalesce((SELECT j.id FROM jobs j WHERE j.schedule_name = s.name ORDER BY j.schedule_tick DESC LIMIT 1), 0)::bigint AS last_job_id
FROM schedules s
ORDER BY s.name;

-- name: ScheduleDelete :one
-- Removes a schedule (its jobs stay, still naming it) and wakes every scheduler.
WITH deleted AS (
    DELETE FROM schedules WHERE name = sqlc.arg(name) RETURNING name
)
SELECT d.name, pg_notify('gendurable_schedules', d.name)::text AS notified
FROM deleted d;

-- name: ScheduleListDue :many
-- The running schedules due at as_of (at most max_rows, earliest first), then the first
-- one that is not: the scheduler fires the due ones and sleeps until that one. One
-- statement per wake-up; two ordered scans of schedules_due, the first stopping at the
-- first tick after as_of (or at max_rows), the second after one row, so the rows read are
-- the due schedules + 2 whatever the number of schedules (TestScheduleListDueReadsTheDueOnly).
-- Each with its trace context, which the tick's span links to (docs/observability.md).
(SELECT s.name, s.cron, s.timezone, s.next_run_at, s.trace_context
 FROM schedules s
 WHERE NOT s.paused AND s.next_run_at <= sqlc.arg(as_of)::timestamptz
 ORDER BY s.next_run_at
 LIMIT sqlc.arg(max_rows)::int)
UNION ALL
(SELECT s.name, s.cron, s.timezone, s.next_run_at, s.trace_context
 FROM schedules s
 WHERE NOT s.paused AND s.next_run_at > sqlc.arg(as_of)::timestamptz
 ORDER BY s.next_run_at
 LIMIT 1);

-- name: ScheduleFire :one
-- Fires one due tick: advances the schedule from due_at to next_run_at (compare-and-set:
-- of several processes firing the same tick, one updates the row and the others find
-- next_run_at moved, answer no row and write nothing) and, unless overlap is 'skip' and
-- the schedule's latest job is live, inserts its job for tick (jobs_schedule_tick makes a
-- second job for the same tick impossible anyway) and notifies the queue's feeders.
-- The job keeps trace_context (NULL: none): the tick's span, or the caller's of "run now".
-- job_id is 0 when no job was inserted. Index use: schedules_pkey, jobs_schedule_tick
-- (one entry, backwards), handlers_pkey,
-- queues_pkey. Cost: one statement per due tick, nothing per step.
WITH advanced AS (
    UPDATE schedules s
    SET next_run_at = sqlc.arg(next_run_at), last_tick_at = sqlc.arg(tick)::timestamptz, updated_at = now()
    WHERE s.name = sqlc.arg(name) AND s.next_run_at = sqlc.arg(due_at) AND NOT s.paused
    RETURNING s.name, s.handler, s.queue, s.input, s.overlap
),
previous AS (
    SELECT a.name,
           a.overlap = 'skip'
           AND coalesce((SELECT j.status FROM jobs j WHERE j.schedule_name = a.name
                         ORDER BY j.schedule_tick DESC LIMIT 1), 'gone')
               IN ('runnable', 'executing', 'awaiting') AS live
    FROM advanced a
),
new_queue AS (
    INSERT INTO queues (name)
    SELECT a.queue FROM advanced a
    ON CONFLICT (name) DO NOTHING
),
inserted AS (
    INSERT INTO jobs (queue, handler, input, max_attempts, schedule_name, schedule_tick, trace_context)
    SELECT a.queue, a.handler, a.input, h.max_attempts, a.name, sqlc.arg(tick)::timestamptz, sqlc.narg(trace_context)::text
    FROM advanced a
    JOIN previous p ON p.name = a.name
    JOIN handlers h ON h.name = a.handler
    WHERE NOT p.live
    ON CONFLICT (schedule_name, schedule_tick) WHERE schedule_name IS NOT NULL DO NOTHING
    RETURNING id, queue
),
notified AS (
    SELECT count(pg_notify('gendurable_jobs', i.queue)) AS n FROM inserted i
)
SELECT a.name, p.live::bool AS skipped,
       coalesce((SELECT i.id FROM inserted i), 0)::bigint AS job_id,
       EXISTS (SELECT 1 FROM handlers h WHERE h.name = a.handler) AS handler_known,
       (SELECT n.n FROM notified n) AS notified
FROM advanced a
JOIN previous p ON p.name = a.name;
