-- citus/0017: distribute the schema of migrations 0001-0017 on a Citus coordinator
-- (docs/citus.md, "Placement"). Applied by pg.Migrate after plain migration 0017, in one
-- transaction, only where the citus extension exists; plain PostgreSQL never runs it.
--
-- jobs, signals, steps and idempotency_keys are distributed by `placement` and colocated: a
-- job family, its inbox, its history and its idempotency record share a shard. The small
-- tables people write (handlers, queues, rate limits, gates, schedules, API keys) become
-- reference tables, copied to every node. Rows that exist already (a database moved onto
-- Citus) all get placement 0, and ids up to the largest of them route there.

-- Citus writes the reference tables' copies over one connection per node in a transaction
-- that also distributes tables (they are tied by foreign keys).
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';

ALTER TABLE jobs ADD COLUMN placement integer NOT NULL DEFAULT 0 CHECK (placement >= 0 AND placement < 1024);
-- The last outcome applied to the row: its lease token, and the step and attempt it ended.
-- The outcome's job UPDATE sets them and the history INSERT ... SELECT that follows it in
-- the same transaction reads them (Citus routes neither an INSERT inside a CTE nor an
-- INSERT ... SELECT from a function of the arguments: sql/citus/outcome.sql).
ALTER TABLE jobs ADD COLUMN outcome_token uuid, ADD COLUMN outcome_step integer, ADD COLUMN outcome_attempt integer;
ALTER TABLE signals ADD COLUMN placement integer NOT NULL DEFAULT 0;
ALTER TABLE steps ADD COLUMN placement integer NOT NULL DEFAULT 0;
ALTER TABLE idempotency_keys ADD COLUMN placement integer NOT NULL DEFAULT 0;

-- The layout the server routes by: a job id is seq * 1024 + placement, except the ids of
-- the jobs distributed here (up to legacy_max_id), which are all at placement 0.
CREATE TABLE placement_layout (
    singleton            boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    placements           integer NOT NULL,
    legacy_max_id        bigint NOT NULL
);
INSERT INTO placement_layout (placements, legacy_max_id) SELECT 1024, coalesce(max(id), 0) FROM jobs;

-- Job ids are drawn by the insert statements (nextval('jobs_id_seq') * 1024 + placement):
-- no column default, since Citus refuses a volatile default it cannot evaluate on the
-- coordinator (and an INSERT ... SELECT into a table with one is pulled to the coordinator).
ALTER TABLE jobs ALTER COLUMN id DROP IDENTITY;
DO $$
DECLARE legacy bigint := (SELECT legacy_max_id FROM placement_layout);
BEGIN
    EXECUTE format('CREATE SEQUENCE jobs_id_seq AS bigint START %s', legacy / 1024 + 1);
END $$;
ALTER TABLE jobs ALTER COLUMN placement DROP DEFAULT;

-- History ids: the outcome's INSERT ... SELECT is pushed down to the shard only into a
-- table without a sequence default. A row's id is the microsecond of its statement (one
-- history row per job per statement, so unique within the job and in order).
ALTER TABLE steps ALTER COLUMN id DROP DEFAULT;
ALTER TABLE steps ALTER COLUMN placement DROP DEFAULT;
DROP SEQUENCE steps_id_seq;
ALTER TABLE signals ALTER COLUMN placement DROP DEFAULT;
ALTER TABLE idempotency_keys ALTER COLUMN placement DROP DEFAULT;

-- Every unique constraint of a distributed table holds the distribution column. Where a
-- key decides the placement (docs/citus.md), a key is at one placement, so the index is
-- as exact as the single-column one it replaces.
ALTER TABLE signals DROP CONSTRAINT signals_job_id_fkey;
ALTER TABLE jobs DROP CONSTRAINT jobs_parent_id_fkey;
ALTER TABLE jobs DROP CONSTRAINT jobs_pkey, ADD PRIMARY KEY (id, placement);
ALTER TABLE signals DROP CONSTRAINT signals_pkey, ADD PRIMARY KEY (id, placement);
DROP INDEX signals_inbox;
CREATE UNIQUE INDEX signals_inbox ON signals (job_id, seq, placement);
ALTER TABLE steps DROP CONSTRAINT steps_pkey, ADD PRIMARY KEY (job_id, id, finished_at, placement);
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_pkey, ADD PRIMARY KEY (key, placement);
DROP INDEX jobs_live_key;
CREATE UNIQUE INDEX jobs_live_key ON jobs (key, placement)
    WHERE key IS NOT NULL AND status IN ('runnable', 'executing', 'awaiting');
DROP INDEX jobs_concurrency_exclusive;
CREATE UNIQUE INDEX jobs_concurrency_exclusive ON jobs (concurrency_key, placement)
    WHERE status = 'executing' AND concurrency_key IS NOT NULL AND gate_shard IS NULL;
-- A gate's slots on Citus: a step of a gated key executes holding a slot number in
-- [0, limit) (gate_shard), unique per key among the executing steps, so at most `limit`
-- execute. Every job of a key lives at the key's placement, so the index is exact; a step
-- that ends leaves it by its status, and no counter has to be given back or reconciled
-- (the gate_slots counters of plain PostgreSQL are not used on Citus).
CREATE UNIQUE INDEX jobs_gate_slot ON jobs (concurrency_key, gate_shard, placement)
    WHERE status = 'executing' AND concurrency_key IS NOT NULL AND gate_shard IS NOT NULL;
DROP INDEX jobs_debounce;
CREATE UNIQUE INDEX jobs_debounce ON jobs (debounce_key, placement)
    WHERE debounce_key IS NOT NULL AND status = 'runnable' AND attempted_at IS NULL;
DROP INDEX jobs_schedule_tick;
CREATE UNIQUE INDEX jobs_schedule_tick ON jobs (schedule_name, schedule_tick, placement)
    WHERE schedule_name IS NOT NULL;

SELECT create_reference_table(t)
FROM unnest(ARRAY['handlers', 'queues', 'rate_limits', 'rate_buckets', 'gates', 'gate_slots',
                  'schedules', 'api_keys', 'placement_layout']) AS t;
SELECT create_distributed_table('jobs', 'placement');
SELECT create_distributed_table(t, 'placement', colocate_with => 'jobs')
FROM unnest(ARRAY['signals', 'steps', 'idempotency_keys']) AS t;
-- A job's inbox goes with it (ON DELETE SET NULL of a child's parent_id is not possible with
-- the distribution column in the key: the parent link is kept without a foreign key; GC
-- deletes a parent only after its children, JobGCSelect).
ALTER TABLE signals ADD FOREIGN KEY (job_id, placement) REFERENCES jobs (id, placement) ON DELETE CASCADE;
