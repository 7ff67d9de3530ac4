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

-- gendurable_placement_of_key is the server's PlacementOfKey in SQL: FNV-1a (64 bits) of
-- the key's UTF-8 bytes, mod 1024. The low 10 bits of each step of FNV-1a depend only on
-- the low 10 bits of the step before (a xor with a byte, a product mod 2^64), so the hash
-- runs mod 1024: offset basis 14695981039346656037 mod 1024 = 805, prime 1099511628211 mod
-- 1024 = 435. TestCitusPlacementOfKeyInSQL holds the two to the same answers.
CREATE FUNCTION gendurable_placement_of_key(key text) RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    b bytea := convert_to(key, 'UTF8');
    h integer := 805;
BEGIN
    FOR i IN 0 .. length(b) - 1 LOOP
        h := ((h # get_byte(b, i)) * 435) % 1024;
    END LOOP;
    RETURN h;
END
$$;

-- gendurable_enqueue (migrations/0013_debounce.sql) on Citus: the same options and
-- checks, each job written at its placement with an id that carries it.
CREATE OR REPLACE FUNCTION gendurable_enqueue(handler text, input jsonb DEFAULT '{}', options jsonb DEFAULT '{}')
RETURNS bigint LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    opts jsonb := coalesce(options, '{}'::jsonb);
    name_pattern constant text := '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$';
    name_message constant text :=
        'must be 1-128 characters of letters, digits, ''_'', ''.'', '':'' or ''-'', starting with a letter or digit';
    unknown text;
    job_handler text := gendurable_enqueue.handler;
    job_queue text;
    job_key text;
    job_priority integer;
    job_run_at timestamptz;
    job_run_at_text text;
    job_delay_text text;
    job_delay_ms bigint;
    job_concurrency_key text;
    job_max_attempts integer;
    handler_max_attempts integer;
    rate_name text;
    rate_key text;
    rate_weight integer;
    limits jsonb;
    extra_limits jsonb;
    debounce jsonb;
    job_debounce_key text;
    debounce_period_ms bigint;
    debounce_max_wait_ms bigint;
    job_debounce_deadline timestamptz;
    job_eligible_at timestamptz;
    job_id bigint;
    job_placement integer;
BEGIN
    IF jsonb_typeof(opts) <> 'object' THEN
        PERFORM gendurable_enqueue_refuse('options', format('must be a JSON object, got %s', opts));
    END IF;
    SELECT string_agg(k, ', ' ORDER BY k) INTO unknown
    FROM jsonb_object_keys(opts) k
    WHERE k NOT IN ('queue', 'key', 'priority', 'run_at', 'delay', 'concurrency_key', 'rate_limit', 'rate_limits',
                    'max_attempts', 'debounce');
    IF unknown IS NOT NULL THEN
        PERFORM gendurable_enqueue_refuse('options', format('holds unknown members: %s (known: queue, key, '
            'priority, run_at, delay, concurrency_key, rate_limit, rate_limits, max_attempts, debounce)', unknown));
    END IF;

    IF job_handler IS NULL OR job_handler !~ name_pattern THEN
        PERFORM gendurable_enqueue_refuse('handler', name_message);
    END IF;
    job_queue := coalesce(gendurable_enqueue_text(opts, 'queue', 'queue'), 'default');
    IF job_queue !~ name_pattern THEN
        PERFORM gendurable_enqueue_refuse('queue', name_message);
    END IF;
    job_key := gendurable_enqueue_text(opts, 'key', 'key');
    IF job_key IS NOT NULL AND octet_length(job_key) NOT BETWEEN 1 AND 512 THEN
        PERFORM gendurable_enqueue_refuse('key', 'must be 1-512 bytes');
    END IF;
    job_concurrency_key := gendurable_enqueue_text(opts, 'concurrency_key', 'concurrency_key');
    IF job_concurrency_key IS NOT NULL AND octet_length(job_concurrency_key) NOT BETWEEN 1 AND 512 THEN
        PERFORM gendurable_enqueue_refuse('concurrency_key', 'must be 1-512 bytes');
    END IF;
    job_priority := gendurable_enqueue_int(opts, 'priority', 'priority', 0, 9,
        'must be between 0 (most urgent) and 9');
    job_max_attempts := gendurable_enqueue_int(opts, 'max_attempts', 'max_attempts', 1, 1000,
        'must be between 1 and 1000');

    job_run_at_text := gendurable_enqueue_text(opts, 'run_at', 'run_at');
    job_delay_text := gendurable_enqueue_text(opts, 'delay', 'delay');
    IF job_run_at_text IS NOT NULL AND job_delay_text IS NOT NULL THEN
        PERFORM gendurable_enqueue_refuse('delay', 'give run_at or delay, not both');
    END IF;
    IF job_run_at_text IS NOT NULL THEN
        BEGIN
            job_run_at := job_run_at_text::timestamptz;
        EXCEPTION WHEN data_exception THEN
            PERFORM gendurable_enqueue_refuse('run_at',
                format('must be a timestamp such as "2026-01-02T15:04:05Z", got %s', to_json(job_run_at_text)));
        END;
    END IF;
    IF job_delay_text IS NOT NULL THEN
        job_delay_ms := gendurable_duration_ms('delay', job_delay_text);
        IF job_delay_ms < 0 THEN
            PERFORM gendurable_enqueue_refuse('delay', 'must not be negative');
        END IF;
    END IF;

    debounce := gendurable_enqueue_debounce(opts);
    job_debounce_key := debounce ->> 'key';
    debounce_period_ms := (debounce ->> 'period_ms')::bigint;
    debounce_max_wait_ms := (debounce ->> 'max_wait_ms')::bigint;

    SELECT h.max_attempts INTO handler_max_attempts FROM handlers h WHERE h.name = job_handler;
    IF NOT FOUND THEN
        PERFORM gendurable_enqueue_refuse('handler',
            format('no handler named %s is registered (PUT /v1/handlers/%s first)', to_json(job_handler), job_handler));
    END IF;
    limits := gendurable_enqueue_rate_limits(opts);
    -- The first limit goes to the rate_limit columns, the others to extra_rate_limits.
    rate_name := limits -> 0 ->> 'name';
    rate_key := nullif(limits -> 0 ->> 'key', '');
    rate_weight := (limits -> 0 ->> 'weight')::integer;
    IF jsonb_array_length(limits) > 1 THEN
        extra_limits := limits - 0;
    END IF;

    -- On Citus (docs/citus.md): a job lives at the placement of what places it, its key,
    -- debounce key or concurrency key (gendurable_placement_of_key, as the server's
    -- PlacementOfKey), else at a random one; what Citus cannot keep exact is refused.
    IF rate_name IS NOT NULL THEN
        PERFORM gendurable_enqueue_refuse('rate_limit', 'rate limits are not supported on Citus yet (docs/citus.md)');
    END IF;
    IF job_concurrency_key IS NOT NULL AND (job_key IS NOT NULL OR job_debounce_key IS NOT NULL) THEN
        PERFORM gendurable_enqueue_refuse('concurrency_key',
            'on Citus a concurrency key is exact only for a job it places: not with a key or a debounce key');
    END IF;
    job_placement := CASE WHEN job_key IS NOT NULL THEN gendurable_placement_of_key(job_key)
                          WHEN job_debounce_key IS NOT NULL THEN gendurable_placement_of_key(job_debounce_key)
                          WHEN job_concurrency_key IS NOT NULL THEN gendurable_placement_of_key(job_concurrency_key)
                          ELSE floor(random() * 1024)::integer END;

    -- Checked first so that a known queue costs no speculative insert.
    IF NOT EXISTS (SELECT 1 FROM queues q WHERE q.name = job_queue) THEN
        INSERT INTO queues (name) VALUES (job_queue) ON CONFLICT (name) DO NOTHING;
    END IF;

    -- clock_timestamp, not now(): the caller's transaction may have begun long before.
    IF job_debounce_key IS NOT NULL THEN
        -- One runnable, never-claimed job holds a debounce key (jobs_debounce): a repeat
        -- within its period takes the new input and pushes the job back to a period from
        -- now, never past the deadline of its first insert (+ max_wait).
        job_eligible_at := clock_timestamp() + debounce_period_ms * interval '1 millisecond';
        job_debounce_deadline := clock_timestamp() + debounce_max_wait_ms * interval '1 millisecond';
        INSERT INTO jobs AS j (id, placement, updated_at, queue, handler, input, priority, eligible_at, concurrency_key,
                               rate_limit, rate_key, rate_weight, extra_rate_limits, max_attempts,
                               debounce_key, debounce_deadline)
        VALUES (nextval('jobs_id_seq') * 1024 + job_placement, job_placement, clock_timestamp(), job_queue, job_handler, coalesce(gendurable_enqueue.input, '{}'::jsonb),
                coalesce(job_priority, 5), job_eligible_at, job_concurrency_key,
                rate_name, rate_key, coalesce(rate_weight, 1), extra_limits,
                coalesce(job_max_attempts, handler_max_attempts), job_debounce_key, job_debounce_deadline)
        ON CONFLICT (debounce_key, placement) WHERE debounce_key IS NOT NULL AND status = 'runnable' AND attempted_at IS NULL
        DO UPDATE SET input = excluded.input,
                      eligible_at = least(excluded.eligible_at, coalesce(j.debounce_deadline, excluded.eligible_at)),
                      updated_at = excluded.updated_at
        RETURNING j.id INTO job_id;
        RETURN job_id;
    END IF;
    job_eligible_at := coalesce(job_run_at, clock_timestamp() + coalesce(job_delay_ms, 0) * interval '1 millisecond');
    LOOP
        INSERT INTO jobs (id, placement, queue, handler, input, key, priority, eligible_at, concurrency_key,
                          rate_limit, rate_key, rate_weight, extra_rate_limits, max_attempts)
        VALUES (nextval('jobs_id_seq') * 1024 + job_placement, job_placement, job_queue, job_handler, coalesce(gendurable_enqueue.input, '{}'::jsonb), job_key,
                coalesce(job_priority, 5), job_eligible_at, job_concurrency_key,
                rate_name, rate_key, coalesce(rate_weight, 1), extra_limits,
                coalesce(job_max_attempts, handler_max_attempts))
        ON CONFLICT (key, placement) WHERE key IS NOT NULL AND status IN ('runnable', 'executing', 'awaiting')
        DO NOTHING
        RETURNING id INTO job_id;
        IF job_id IS NOT NULL THEN
            -- Held by PostgreSQL until the caller commits, dropped if it rolls back.
            IF job_eligible_at <= clock_timestamp() THEN
                PERFORM pg_notify('gendurable_jobs', job_queue);
            END IF;
            RETURN job_id;
        END IF;
        -- The key is held by a live job: answer it (unless it finished meanwhile: insert again).
        SELECT j.id INTO job_id FROM jobs j
        WHERE j.placement = job_placement AND j.key = job_key AND j.status IN ('runnable', 'executing', 'awaiting');
        IF job_id IS NOT NULL THEN
            RETURN job_id;
        END IF;
    END LOOP;
END
$$;
