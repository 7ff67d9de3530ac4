-- 0012: several rate limits per job (docs/flow-control.md, "Rate limits").
--
-- A job's first rate limit stays in rate_limit/rate_key/rate_weight; the others go to
-- extra_rate_limits, a JSON array of {name, key, weight} (key '' when none), NULL for a
-- job with at most one limit. So a job without a rate limit, or with one, stores what it
-- did and its pick reads the same rows: extra_rate_limits is read from the row in hand
-- and expanded only when it is not NULL (the larger pick statement's planning and start
-- cost is measured in docs/flow-control.md, "What it costs").
-- Adding a nullable column without a default rewrites nothing.
ALTER TABLE jobs ADD COLUMN extra_rate_limits jsonb
    CHECK (extra_rate_limits IS NULL OR (jsonb_typeof(extra_rate_limits) = 'array' AND rate_limit IS NOT NULL));

-- gendurable_enqueue_rate_limits reads the rate_limit or rate_limits option of an
-- options object as an array of {name, key, weight} (key '' when none; '[]' for none),
-- refusing what POST /v1/jobs refuses: both forms, more than 8, a bucket twice, a bad
-- member, a limit that does not exist or whose burst cannot hold the weight (one
-- rate_limits_pkey lookup per limit).
CREATE FUNCTION gendurable_enqueue_rate_limits(opts jsonb)
RETURNS jsonb LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    name_pattern constant text := '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$';
    name_message constant text :=
        'must be 1-128 characters of letters, digits, ''_'', ''.'', '':'' or ''-'', starting with a letter or digit';
    unknown text;
    rate jsonb;
    rate_name text;
    rate_key text;
    rate_weight integer;
    rate_burst float8;
    raw_limits jsonb;
    field_prefix text;
    field text;
    limits jsonb := '[]'::jsonb;
BEGIN
    -- rate_limit is the one-element form of rate_limits; both are read into limits, an
    -- array of {name, key, weight} (key '' when absent), with the field path of each.
    IF opts -> 'rate_limit' IS NOT NULL AND jsonb_typeof(opts -> 'rate_limit') <> 'null'
       AND opts -> 'rate_limits' IS NOT NULL AND jsonb_typeof(opts -> 'rate_limits') <> 'null' THEN
        PERFORM gendurable_enqueue_refuse('rate_limits', 'give rate_limit or rate_limits, not both');
    END IF;
    IF opts -> 'rate_limits' IS NOT NULL AND jsonb_typeof(opts -> 'rate_limits') <> 'null' THEN
        IF jsonb_typeof(opts -> 'rate_limits') <> 'array' THEN
            PERFORM gendurable_enqueue_refuse('rate_limits',
                format('must be an array of {name, key, weight}, got %s', opts -> 'rate_limits'));
        END IF;
        IF jsonb_array_length(opts -> 'rate_limits') > 8 THEN
            PERFORM gendurable_enqueue_refuse('rate_limits',
                format('names %s rate limits, more than the 8 a job may name', jsonb_array_length(opts -> 'rate_limits')));
        END IF;
        raw_limits := opts -> 'rate_limits';
        field_prefix := 'rate_limits/';
    ELSIF opts -> 'rate_limit' IS NOT NULL AND jsonb_typeof(opts -> 'rate_limit') <> 'null' THEN
        raw_limits := jsonb_build_array(opts -> 'rate_limit');
        field_prefix := 'rate_limit';
    END IF;
    FOR i IN 0 .. coalesce(jsonb_array_length(raw_limits), 0) - 1 LOOP
        rate := raw_limits -> i;
        field := CASE WHEN field_prefix = 'rate_limit' THEN 'rate_limit' ELSE field_prefix || i END;
        IF jsonb_typeof(rate) <> 'object' THEN
            PERFORM gendurable_enqueue_refuse(field, format('must be an object {name, key, weight}, got %s', rate));
        END IF;
        SELECT string_agg(k, ', ' ORDER BY k) INTO unknown
        FROM jsonb_object_keys(rate) k WHERE k NOT IN ('name', 'key', 'weight');
        IF unknown IS NOT NULL THEN
            PERFORM gendurable_enqueue_refuse(field, format('holds unknown members: %s (known: name, key, weight)', unknown));
        END IF;
        rate_name := gendurable_enqueue_text(rate, 'name', field || '/name');
        IF rate_name IS NULL OR rate_name !~ name_pattern THEN
            PERFORM gendurable_enqueue_refuse(field || '/name', name_message);
        END IF;
        rate_key := coalesce(gendurable_enqueue_text(rate, 'key', field || '/key'), '');
        rate_weight := coalesce(nullif(gendurable_enqueue_int(rate, 'weight', field || '/weight',
            -2147483648, 2147483647, 'must be an integer'), 0), 1);
        IF rate_weight < 1 THEN
            PERFORM gendurable_enqueue_refuse(field || '/weight', 'must be at least 1');
        END IF;
        IF limits @> jsonb_build_array(jsonb_build_object('name', rate_name, 'key', rate_key)) THEN
            PERFORM gendurable_enqueue_refuse(field,
                format('names the bucket of rate limit %s and key %s twice', to_json(rate_name), to_json(rate_key)));
        END IF;
        limits := limits || jsonb_build_array(jsonb_build_object('name', rate_name, 'key', rate_key, 'weight', rate_weight));
    END LOOP;

    FOR i IN 0 .. jsonb_array_length(limits) - 1 LOOP
        field := CASE WHEN field_prefix = 'rate_limit' THEN 'rate_limit' ELSE field_prefix || i END;
        rate_name := limits -> i ->> 'name';
        rate_weight := (limits -> i ->> 'weight')::integer;
        SELECT l.burst INTO rate_burst FROM rate_limits l WHERE l.name = rate_name;
        IF NOT FOUND THEN
            PERFORM gendurable_enqueue_refuse(field || '/name',
                format('no rate limit named %s exists (PUT /v1/rate-limits/%s first)', to_json(rate_name), rate_name));
        END IF;
        IF rate_burst < rate_weight THEN
            PERFORM gendurable_enqueue_refuse(field || '/weight',
                format('weight %s can never fit: rate limit %s has burst %s', rate_weight, to_json(rate_name), rate_burst));
        END IF;
    END LOOP;
    RETURN limits;
END
$$;

-- gendurable_enqueue takes rate_limits [{name, key, weight}, ...] too.
-- gendurable_enqueue inserts a job from the caller's transaction and returns its id; a
-- key a live job already holds returns that job's id instead (the live-key dedup of
-- POST /v1/jobs). Options (JSON object, every member optional): queue, key, priority,
-- run_at (timestamptz text) or delay (Go duration), concurrency_key,
-- rate_limit {name, key, weight} or rate_limits [{name, key, weight}, ...] (not both; at most
-- 8, each bucket once), max_attempts. A delay counts from the call.
-- Cost: a handlers_pkey lookup, a queues_pkey lookup (an insert for a new queue), a
-- rate_limits_pkey lookup per rate limit, and the job's insert (jobs_live_key as
-- the arbiter of a keyed one).
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
    job_eligible_at timestamptz;
    job_id bigint;
BEGIN
    IF jsonb_typeof(opts) <> 'object' THEN
        PERFORM gendurable_enqueue_refuse('options', format('must be a JSON object, got %s', opts));
    END IF;
    SELECT string_agg(k, ', ' ORDER BY k) INTO unknown
    FROM jsonb_object_keys(opts) k
    WHERE k NOT IN ('queue', 'key', 'priority', 'run_at', 'delay', 'concurrency_key', 'rate_limit', 'rate_limits',
                    'max_attempts');
    IF unknown IS NOT NULL THEN
        PERFORM gendurable_enqueue_refuse('options', format('holds unknown members: %s (known: queue, key, '
            'priority, run_at, delay, concurrency_key, rate_limit, rate_limits, max_attempts)', unknown));
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

    -- Checked first so that a known queue costs no speculative insert.
    IF NOT EXISTS (SELECT 1 FROM queues q WHERE q.name = job_queue) THEN
        INSERT INTO queues (name) VALUES (job_queue) ON CONFLICT (name) DO NOTHING;
    END IF;

    -- clock_timestamp, not now(): the caller's transaction may have begun long before.
    job_eligible_at := coalesce(job_run_at, clock_timestamp() + coalesce(job_delay_ms, 0) * interval '1 millisecond');
    LOOP
        INSERT INTO jobs (queue, handler, input, key, priority, eligible_at, concurrency_key,
                          rate_limit, rate_key, rate_weight, extra_rate_limits, max_attempts)
        VALUES (job_queue, job_handler, coalesce(gendurable_enqueue.input, '{}'::jsonb), job_key,
                coalesce(job_priority, 5), job_eligible_at, job_concurrency_key,
                rate_name, rate_key, coalesce(rate_weight, 1), extra_limits,
                coalesce(job_max_attempts, handler_max_attempts))
        ON CONFLICT (key) WHERE key IS NOT NULL AND status IN ('runnable', 'executing', 'awaiting')
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
        WHERE j.key = job_key AND j.status IN ('runnable', 'executing', 'awaiting');
        IF job_id IS NOT NULL THEN
            RETURN job_id;
        END IF;
    END LOOP;
END
$$;

COMMENT ON FUNCTION gendurable_enqueue(text, jsonb, jsonb) IS
    'Insert a gendurable job from the calling transaction (it exists iff that transaction commits); see docs/sql-enqueue.md';
