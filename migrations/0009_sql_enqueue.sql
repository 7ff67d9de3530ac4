-- 0009: gendurable_enqueue, the transactional enqueue (docs/sql-enqueue.md).
--
-- An application calls gendurable_enqueue inside its own transaction: the job is a row
-- of that transaction, so it exists if and only if the transaction commits, and the
-- NOTIFY that wakes the dispatchers is sent at commit (PostgreSQL holds notifications
-- until then and drops them on rollback). The options follow the rules of POST /v1/jobs
-- (engine.NewJob.toInsert and JobInsertMany): every refusal raises SQLSTATE 22023
-- (invalid_parameter_value) with the field in the error's column name and a message
-- that names it, before anything is written.

-- gendurable_enqueue_refuse raises the error of a refused option.
CREATE FUNCTION gendurable_enqueue_refuse(field text, message text)
RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', COLUMN = field,
        MESSAGE = format('gendurable_enqueue: %s: %s', field, message);
END
$$;

-- gendurable_enqueue_text reads an optional string member of an options object (NULL
-- when absent or JSON null) and refuses any other JSON type.
CREATE FUNCTION gendurable_enqueue_text(doc jsonb, member text, field text)
RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF doc -> member IS NULL OR jsonb_typeof(doc -> member) = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(doc -> member) <> 'string' THEN
        PERFORM gendurable_enqueue_refuse(field, format('must be a string, got %s', doc -> member));
    END IF;
    RETURN doc ->> member;
END
$$;

-- gendurable_enqueue_int reads an optional integer member between lo and hi.
CREATE FUNCTION gendurable_enqueue_int(doc jsonb, member text, field text, lo integer, hi integer, range_message text)
RETURNS integer LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    n numeric;
BEGIN
    IF doc -> member IS NULL OR jsonb_typeof(doc -> member) = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(doc -> member) <> 'number' OR (doc ->> member)::numeric % 1 <> 0 THEN
        PERFORM gendurable_enqueue_refuse(field, format('must be an integer, got %s', doc -> member));
    END IF;
    n := (doc ->> member)::numeric;
    IF n < lo OR n > hi THEN
        PERFORM gendurable_enqueue_refuse(field, format('%s, got %s', range_message, n));
    END IF;
    RETURN n::integer;
END
$$;

-- gendurable_duration_ms reads a Go duration string ("500ms", "30s", "1h30m", "-5s",
-- "0") as milliseconds, truncated toward zero as Go's Duration.Milliseconds does.
CREATE FUNCTION gendurable_duration_ms(field text, d text)
RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    rest text := d;
    negative boolean := false;
    part text[];
    total numeric := 0;
BEGIN
    IF left(rest, 1) IN ('-', '+') THEN
        negative := left(rest, 1) = '-';
        rest := substr(rest, 2);
    END IF;
    IF rest = '0' THEN
        RETURN 0;
    END IF;
    IF rest !~ '^(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$' THEN
        PERFORM gendurable_enqueue_refuse(field,
            format('must be a duration such as "500ms", "30s" or "1h30m", got %s', to_json(d)));
    END IF;
    FOR part IN SELECT regexp_matches(rest, '([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)', 'g') LOOP
        total := total + part[1]::numeric * CASE part[2]
            WHEN 'ns' THEN 0.000001 WHEN 'us' THEN 0.001 WHEN 'µs' THEN 0.001 WHEN 'μs' THEN 0.001
            WHEN 'ms' THEN 1 WHEN 's' THEN 1000 WHEN 'm' THEN 60000 ELSE 3600000 END;
    END LOOP;
    -- Go's time.Duration holds at most 2^63-1 ns (about 292 years).
    IF total > 9223372036854 THEN
        PERFORM gendurable_enqueue_refuse(field, format('is longer than a duration can be, got %s', to_json(d)));
    END IF;
    RETURN CASE WHEN negative THEN -trunc(total) ELSE trunc(total) END;
END
$$;

-- gendurable_enqueue inserts a job from the caller's transaction and returns its id; a
-- key a live job already holds returns that job's id instead (the live-key dedup of
-- POST /v1/jobs). Options (JSON object, every member optional): queue, key, priority,
-- run_at (timestamptz text) or delay (Go duration), concurrency_key,
-- rate_limit {name, key, weight}, max_attempts. A delay counts from the call.
-- Cost: a handlers_pkey lookup, a queues_pkey lookup (an insert for a new queue), a
-- rate_limits_pkey lookup with a rate limit, and the job's insert (jobs_live_key as
-- the arbiter of a keyed one).
CREATE FUNCTION gendurable_enqueue(handler text, input jsonb DEFAULT '{}', options jsonb DEFAULT '{}')
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
    rate jsonb;
    rate_name text;
    rate_key text;
    rate_weight integer;
    rate_burst float8;
    job_eligible_at timestamptz;
    job_id bigint;
BEGIN
    IF jsonb_typeof(opts) <> 'object' THEN
        PERFORM gendurable_enqueue_refuse('options', format('must be a JSON object, got %s', opts));
    END IF;
    SELECT string_agg(k, ', ' ORDER BY k) INTO unknown
    FROM jsonb_object_keys(opts) k
    WHERE k NOT IN ('queue', 'key', 'priority', 'run_at', 'delay', 'concurrency_key', 'rate_limit', 'max_attempts');
    IF unknown IS NOT NULL THEN
        PERFORM gendurable_enqueue_refuse('options', format('holds unknown members: %s (known: queue, key, '
            'priority, run_at, delay, concurrency_key, rate_limit, max_attempts)', unknown));
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

    rate := opts -> 'rate_limit';
    IF rate IS NOT NULL AND jsonb_typeof(rate) <> 'null' THEN
        IF jsonb_typeof(rate) <> 'object' THEN
            PERFORM gendurable_enqueue_refuse('rate_limit', format('must be an object {name, key, weight}, got %s', rate));
        END IF;
        SELECT string_agg(k, ', ' ORDER BY k) INTO unknown
        FROM jsonb_object_keys(rate) k WHERE k NOT IN ('name', 'key', 'weight');
        IF unknown IS NOT NULL THEN
            PERFORM gendurable_enqueue_refuse('rate_limit', format('holds unknown members: %s (known: name, key, weight)', unknown));
        END IF;
        rate_name := gendurable_enqueue_text(rate, 'name', 'rate_limit/name');
        IF rate_name IS NULL OR rate_name !~ name_pattern THEN
            PERFORM gendurable_enqueue_refuse('rate_limit/name', name_message);
        END IF;
        rate_key := nullif(gendurable_enqueue_text(rate, 'key', 'rate_limit/key'), '');
        rate_weight := coalesce(nullif(gendurable_enqueue_int(rate, 'weight', 'rate_limit/weight',
            -2147483648, 2147483647, 'must be an integer'), 0), 1);
        IF rate_weight < 1 THEN
            PERFORM gendurable_enqueue_refuse('rate_limit/weight', 'must be at least 1');
        END IF;
    END IF;

    SELECT h.max_attempts INTO handler_max_attempts FROM handlers h WHERE h.name = job_handler;
    IF NOT FOUND THEN
        PERFORM gendurable_enqueue_refuse('handler',
            format('no handler named %s is registered (PUT /v1/handlers/%s first)', to_json(job_handler), job_handler));
    END IF;
    IF rate_name IS NOT NULL THEN
        SELECT l.burst INTO rate_burst FROM rate_limits l WHERE l.name = rate_name;
        IF NOT FOUND THEN
            PERFORM gendurable_enqueue_refuse('rate_limit/name',
                format('no rate limit named %s exists (PUT /v1/rate-limits/%s first)', to_json(rate_name), rate_name));
        END IF;
        IF rate_burst < rate_weight THEN
            PERFORM gendurable_enqueue_refuse('rate_limit/weight',
                format('weight %s can never fit: rate limit %s has burst %s', rate_weight, to_json(rate_name), rate_burst));
        END IF;
    END IF;

    -- Checked first so that a known queue costs no speculative insert.
    IF NOT EXISTS (SELECT 1 FROM queues q WHERE q.name = job_queue) THEN
        INSERT INTO queues (name) VALUES (job_queue) ON CONFLICT (name) DO NOTHING;
    END IF;

    -- clock_timestamp, not now(): the caller's transaction may have begun long before.
    job_eligible_at := coalesce(job_run_at, clock_timestamp() + coalesce(job_delay_ms, 0) * interval '1 millisecond');
    LOOP
        INSERT INTO jobs (queue, handler, input, key, priority, eligible_at, concurrency_key,
                          rate_limit, rate_key, rate_weight, max_attempts)
        VALUES (job_queue, job_handler, coalesce(gendurable_enqueue.input, '{}'::jsonb), job_key,
                coalesce(job_priority, 5), job_eligible_at, job_concurrency_key,
                rate_name, rate_key, coalesce(rate_weight, 1), coalesce(job_max_attempts, handler_max_attempts))
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
