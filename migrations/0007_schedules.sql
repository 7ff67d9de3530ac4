-- 0007: schedules (periodic jobs) and the job's link to the schedule tick that made it.
--
-- next_run_at is the schedule's next due tick, computed in Go from cron and timezone
-- (engine.ScheduleSpec). Firing a tick is one compare-and-set on it (ScheduleFire): of
-- any number of server processes that see the same due tick, exactly one advances it
-- and inserts the job; the others' update finds next_run_at moved and writes nothing.
CREATE TABLE schedules (
    name                 text PRIMARY KEY,
    cron                 text NOT NULL,
    timezone             text NOT NULL DEFAULT 'UTC',
    handler              text NOT NULL,
    queue                text NOT NULL DEFAULT 'default',
    input                jsonb NOT NULL DEFAULT '{}',
    overlap              text NOT NULL DEFAULT 'allow' CHECK (overlap IN ('skip', 'allow')),
    paused               boolean NOT NULL DEFAULT false,
    next_run_at          timestamptz NOT NULL,
    -- The last tick fired (a job inserted, or skipped because the previous run was live).
    last_tick_at         timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now()
);
-- The scheduler's wake-up: the earliest due ticks of the running schedules.
CREATE INDEX schedules_due ON schedules (next_run_at) WHERE NOT paused;

ALTER TABLE jobs ADD COLUMN schedule_name text;
ALTER TABLE jobs ADD COLUMN schedule_tick timestamptz;
-- A tick is part of the job's identity: one job per (schedule, tick), whatever races.
-- Also the overlap check's probe (the schedule's latest job, a backward scan of one entry).
-- Partial: jobs without a schedule pay nothing.
CREATE UNIQUE INDEX jobs_schedule_tick ON jobs (schedule_name, schedule_tick)
    WHERE schedule_name IS NOT NULL;
