-- citus/0038: a fairness key beside a concurrency key or a rate limit, no longer refused by
-- gendurable_enqueue on Citus (docs/citus.md, "Fair share"). A concurrency key places its
-- job (where K=1 is exact), before a fairness key: the job of a fairness key that a
-- concurrency key placed elsewhere is claimed by that shard's fair claim, and counts
-- against the key's cap there. A rate limit beside a fairness key is a remote bucket, as
-- beside a debounce key or a concurrency key (citus/0031); in a fair queue it is refused
-- as on plain PostgreSQL. Below, gendurable_enqueue of citus/0032 with those two changes.
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
    job_trace_context text;
    job_placement integer;
    job_fairness_key text;
    job_queue_fair boolean;
    job_rate_placement integer;
    debounce_placement integer;
    pending_id bigint;
    pending_placement integer;
    insert_time timestamptz;
BEGIN
    -- On a worker (Citus copies the function to every node) the key's lock would exclude
    -- nobody: the inserts and revivals of keyed jobs take it on the coordinator.
    IF NOT citus_is_coordinator() THEN
        RAISE EXCEPTION 'gendurable_enqueue runs on the Citus coordinator, not on a worker node'
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'connect to the coordinator (docs/sql-enqueue.md): a job''s key is locked there';
    END IF;
    IF jsonb_typeof(opts) <> 'object' THEN
        PERFORM gendurable_enqueue_refuse('options', format('must be a JSON object, got %s', opts));
    END IF;
    SELECT string_agg(k, ', ' ORDER BY k) INTO unknown
    FROM jsonb_object_keys(opts) k
    WHERE k NOT IN ('queue', 'key', 'priority', 'run_at', 'delay', 'concurrency_key', 'rate_limit', 'rate_limits',
                    'max_attempts', 'debounce', 'traceparent', 'tracestate', 'fairness_key');
    IF unknown IS NOT NULL THEN
        PERFORM gendurable_enqueue_refuse('options', format('holds unknown members: %s (known: queue, key, '
            'priority, run_at, delay, concurrency_key, rate_limit, rate_limits, max_attempts, debounce, traceparent, tracestate, '
            'fairness_key)', unknown));
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
    job_trace_context := gendurable_enqueue_trace_context(opts);
    job_fairness_key := gendurable_enqueue_text(opts, 'fairness_key', 'fairness_key');
    IF octet_length(job_fairness_key) > 512 THEN
        PERFORM gendurable_enqueue_refuse('fairness_key', 'must be at most 512 bytes');
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

    -- On Citus (docs/citus.md): a job lives at the placement of what places it, its key,
    -- debounce key or concurrency key (gendurable_placement_of_key, as the server's
    -- PlacementOfKey), else at a random one; what Citus cannot keep exact is refused.
    -- In a fair queue every live job has a fairness key ('' when none is given) and none
    -- has a rate limit (POST /v1/jobs refuses them alike; docs/fairness.md); elsewhere ''
    -- is no key. A new queue is not fair.
    SELECT q.fairness <> 'none' INTO job_queue_fair FROM queues q WHERE q.name = job_queue;
    IF coalesce(job_queue_fair, false) THEN
        IF rate_name IS NOT NULL THEN
            PERFORM gendurable_enqueue_refuse(CASE WHEN opts ? 'rate_limits' THEN 'rate_limits' ELSE 'rate_limit' END,
                format('queue %s is fair (fairness round_robin): its claims apply no rate limit; '
                       'cap the fairness key instead (PUT /v1/queues/%s/fairness-keys/{key})', to_json(job_queue), job_queue));
        END IF;
        job_fairness_key := coalesce(job_fairness_key, '');
    ELSE
        job_fairness_key := nullif(job_fairness_key, '');
    END IF;
    -- A concurrency key places its job first (K=1 is exact only where every job of the
    -- key lives), then a fairness key (its cap counts its steps on one shard; the default
    -- key '' places nothing). A key beside a fairness key, a concurrency key or a rate
    -- limit is displaced: the job lives where they place it, and key_holders names it at
    -- the key's placement. So is a debounce key beside a fairness key or a concurrency key
    -- (debounce_holders). A rate limit beside a fairness key, a debounce key or a
    -- concurrency key is remote: the job lives where they place it, and names its bucket's
    -- placement (rate_placement), where its claimer debits it.
    job_placement := CASE WHEN job_concurrency_key IS NOT NULL THEN gendurable_placement_of_key(job_concurrency_key)
                          WHEN nullif(job_fairness_key, '') IS NOT NULL
                          THEN gendurable_placement_of_key('fairness ' || job_fairness_key)
                          WHEN job_key IS NOT NULL AND rate_name IS NULL
                          THEN gendurable_placement_of_key(job_key)
                          WHEN job_debounce_key IS NOT NULL THEN gendurable_placement_of_key(job_debounce_key)
                          WHEN rate_name IS NOT NULL
                          THEN gendurable_placement_of_key('rate_limit ' || rate_name || ' ' || coalesce(rate_key, ''))
                          ELSE floor(random() * 1024)::integer END;
    IF rate_name IS NOT NULL THEN
        job_rate_placement := gendurable_placement_of_key('rate_limit ' || rate_name || ' ' || coalesce(rate_key, ''));
        -- (its own placement's bucket is debited by the claim, unless it names several:
        -- then its claimer debits them all, or none)
        IF job_rate_placement = job_placement AND extra_limits IS NULL THEN
            job_rate_placement := NULL;
        END IF;
    END IF;
    IF job_key IS NOT NULL AND job_debounce_key IS NULL THEN
        -- The key's lock, held to the caller's commit, taken before anything is written
        -- (as the server takes it): every keyed insert and revival takes it, so the
        -- check below stays true until this job is committed.
        PERFORM pg_advisory_xact_lock(1734634361, hashtext(job_key));
        job_id := gendurable_key_holder(job_key);
        IF job_id IS NOT NULL THEN
            RETURN job_id;
        END IF;
    END IF;
    -- The bucket is minted with the job (a claim cannot insert on Citus), full: the claim
    -- reads updated_at '-infinity' as a bucket holding its burst.
    IF rate_name IS NOT NULL THEN
        INSERT INTO rate_buckets (name, key, placement, tokens, updated_at)
        VALUES (rate_name, coalesce(rate_key, ''), coalesce(job_rate_placement, job_placement), 0, '-infinity')
        ON CONFLICT (name, key, placement) DO NOTHING;
    END IF;

    -- Checked first so that a known queue costs no speculative insert.
    IF NOT EXISTS (SELECT 1 FROM queues q WHERE q.name = job_queue) THEN
        INSERT INTO queues (name) VALUES (job_queue) ON CONFLICT (name) DO NOTHING;
    END IF;

    -- clock_timestamp, not now(): the caller's transaction may have begun long before.
    IF job_debounce_key IS NOT NULL THEN
        -- One runnable, never-claimed job holds a debounce key (jobs_debounce): a repeat
        -- within its period takes the new input and pushes the job back to a period from
        -- now, never past the deadline of its first insert (+ max_wait).
        insert_time := clock_timestamp();
        job_eligible_at := insert_time + debounce_period_ms * interval '1 millisecond';
        job_debounce_deadline := insert_time + debounce_max_wait_ms * interval '1 millisecond';
        -- The key's lock (the server's debounced inserts take it too), then its pending job
        -- wherever it lives: at the key's placement, or named by its holder row.
        PERFORM pg_advisory_xact_lock(1734632546, hashtext(job_debounce_key));
        debounce_placement := gendurable_placement_of_key(job_debounce_key);
        SELECT p.pending_id, p.pending_placement INTO pending_id, pending_placement
        FROM gendurable_debounce_pending(job_debounce_key, job_placement <> debounce_placement) p;
        IF pending_id IS NOT NULL THEN
            WITH target AS (
                SELECT j.id, least(job_eligible_at, coalesce(j.debounce_deadline, job_eligible_at)) AS eligible_at
                FROM jobs j
                WHERE j.placement = pending_placement AND j.id = pending_id AND j.status = 'runnable' AND j.attempted_at IS NULL
                FOR UPDATE
            )
            UPDATE jobs j
            SET input = coalesce(gendurable_enqueue.input, '{}'::jsonb), trace_context = job_trace_context,
                eligible_at = t.eligible_at, updated_at = insert_time
            FROM target t
            WHERE j.placement = pending_placement AND j.id = t.id
            RETURNING j.id INTO job_id;
            IF job_id IS NOT NULL THEN
                RETURN job_id;
            END IF;
            -- (claimed meanwhile: the key is free)
        END IF;
        INSERT INTO jobs AS j (id, placement, updated_at, queue, handler, input, priority, eligible_at, concurrency_key,
                               rate_limit, rate_key, rate_weight, extra_rate_limits, max_attempts,
                               debounce_key, debounce_deadline, trace_context, fairness_key, rate_placement)
        VALUES (nextval('jobs_id_seq') * 1024 + job_placement, job_placement, insert_time, job_queue, job_handler, coalesce(gendurable_enqueue.input, '{}'::jsonb),
                coalesce(job_priority, 5), job_eligible_at, job_concurrency_key,
                rate_name, rate_key, coalesce(rate_weight, 1), extra_limits,
                coalesce(job_max_attempts, handler_max_attempts), job_debounce_key, job_debounce_deadline, job_trace_context,
                job_fairness_key, job_rate_placement)
        ON CONFLICT (debounce_key, placement) WHERE debounce_key IS NOT NULL AND status = 'runnable' AND attempted_at IS NULL
        DO UPDATE SET input = excluded.input, trace_context = excluded.trace_context,
                      eligible_at = least(excluded.eligible_at, coalesce(j.debounce_deadline, excluded.eligible_at)),
                      updated_at = excluded.updated_at
        RETURNING j.id INTO job_id;
        IF job_placement <> debounce_placement THEN
            INSERT INTO debounce_holders (placement, debounce_key, job_id)
            VALUES (debounce_placement, job_debounce_key, job_id)
            ON CONFLICT (debounce_key, placement) DO UPDATE SET job_id = excluded.job_id;
        END IF;
        RETURN job_id;
    END IF;
    job_eligible_at := coalesce(job_run_at, clock_timestamp() + coalesce(job_delay_ms, 0) * interval '1 millisecond');
    LOOP
        INSERT INTO jobs (id, placement, queue, handler, input, key, priority, eligible_at, concurrency_key,
                          rate_limit, rate_key, rate_weight, extra_rate_limits, max_attempts, trace_context, fairness_key,
                          rate_placement)
        VALUES (nextval('jobs_id_seq') * 1024 + job_placement, job_placement, job_queue, job_handler, coalesce(gendurable_enqueue.input, '{}'::jsonb), job_key,
                coalesce(job_priority, 5), job_eligible_at, job_concurrency_key,
                rate_name, rate_key, coalesce(rate_weight, 1), extra_limits,
                coalesce(job_max_attempts, handler_max_attempts), job_trace_context, job_fairness_key, job_rate_placement)
        ON CONFLICT (key, placement) WHERE key IS NOT NULL AND status IN ('runnable', 'executing', 'awaiting')
        DO NOTHING
        RETURNING id INTO job_id;
        IF job_id IS NOT NULL THEN
            IF job_key IS NOT NULL THEN
                -- The key's holder row names the job, wherever it lives: a caller in a
                -- REPEATABLE READ transaction whose snapshot missed a job that took the
                -- key meanwhile fails here with a serialization failure (its upsert meets
                -- the row that job's insert wrote), as the unique index makes it fail on
                -- plain PostgreSQL.
                INSERT INTO key_holders (placement, key, job_id)
                VALUES (gendurable_placement_of_key(job_key), job_key, job_id)
                ON CONFLICT (key, placement) DO UPDATE SET job_id = excluded.job_id;
            END IF;
            -- Held by PostgreSQL until the caller commits, dropped if it rolls back.
            IF job_eligible_at <= clock_timestamp() THEN
                PERFORM pg_notify('gendurable_jobs', job_queue || ' @' || job_placement);
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

COMMENT ON FUNCTION gendurable_enqueue(text, jsonb, jsonb) IS
    'Insert a gendurable job from the calling transaction (it exists iff that transaction commits); see docs/sql-enqueue.md';
