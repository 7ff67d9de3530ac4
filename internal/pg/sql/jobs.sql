-- name: JobInsertMany :many
-- Inserts a batch of jobs (one request item per element of each typed array, in request
-- order; '' / 0 / -1 / year 1 / NULL elements stand for an absent value), with
-- live-key dedup and idempotency keys, creating unknown queues and notifying each queue's feeders once.
-- The whole batch is refused when any handler is unknown: `missing` gates the insert,
-- so nothing is written. Returns the inserted rows (origin 'inserted', with their
-- request position ord), the pre-existing live jobs holding a requested key (origin
-- 'existing') and the jobs an unexpired requested idempotency key points to (origin
-- 'idempotent', with that key). Ids are drawn in request order in `req` so that an
-- idempotency key can be claimed for its job in the same statement: `claimed` inserts the
-- key (or re-points an expired one, judged at as_of, default now()) and only the items
-- whose key it claimed, or that carry none, are inserted.
-- The answer is narrow: an inserted row brings back only what the statement decided (id,
-- defaults, the eligible time, the stored input); JobInsertManyWith takes the rest from the
-- request and the table's defaults (TestBatchInsertAnswerIsTheStoredJob holds the two to
-- the stored row). The jobs of existing keys and of debounced items are answered by id,
-- read in full by JobGetMany only when some item was deduplicated or debounced. The
-- 37-column RETURNING cost 12 ms of server CPU and 4 ms of statement time per 5 000 jobs.
-- A job naming several rate limits carries its first in rate_limits/rate_keys/rate_weights
-- and the others in extra_rate_limits ([{name, key, weight}], NULL for none): each must
-- exist and hold its weight in its burst, or the batch is refused.
-- The JSON arrays (inputs, extra_rate_limits) are text[] cast per element ('' for none):
-- a jsonb[] parameter is parsed at bind time at about four times the cost (5 000 inputs
-- of {"steps":1}: 8.3-9.0 ms as jsonb[], 2.2-2.8 ms as text[] cast to jsonb).
-- Index use: handlers_pkey per distinct handler, rate_limits_pkey per rate limit named,
-- jobs_debounce per debounce key (arbiter), jobs_live_key per keyed item (arbiter),
-- idempotency_keys_pkey per item with an idempotency key, queues_pkey per distinct
-- queue. Cost: one heap insert + its index entries per job (+ one key row per idempotency key).
WITH req AS (
    SELECT r.ord - 1 AS ord, r.queue, r.handler, nullif(r.input, '')::jsonb AS input, nullif(r.key, '') AS key,
           nullif(r.priority, -1)::smallint AS priority,
           nullif(r.run_at, '0001-01-01 00:00:00+00'::timestamptz) AS run_at, r.delay_ms,
           nullif(r.concurrency_key, '') AS concurrency_key, nullif(r.rate_limit, '') AS rate_limit,
           nullif(r.rate_key, '') AS rate_key, nullif(r.rate_weight, 0) AS rate_weight,
           nullif(r.max_attempts, 0) AS max_attempts, nullif(r.parent_id, 0) AS parent_id,
           nullif(r.idempotency_key, '') AS idempotency_key, nullif(r.extra_rate_limits, '')::jsonb AS extra_rate_limits,
           nullif(r.debounce_key, '') AS debounce_key, r.debounce_period_ms, nullif(r.debounce_max_wait_ms, 0) AS debounce_max_wait_ms,
           nullif(r.trace_context, '') AS trace_context,
           -- '' (the default key) in a fair queue, where every live job has a key
           coalesce(nullif(r.fairness_key, ''), CASE WHEN r.queue IN (SELECT q.name FROM queues q WHERE q.fairness <> 'none') THEN '' END) AS fairness_key,
           nextval((SELECT pg_get_serial_sequence('jobs', 'id'))::regclass) AS id
    FROM ROWS FROM (unnest(sqlc.arg(queues)::text[]), unnest(sqlc.arg(handlers)::text[]),
                    unnest(sqlc.arg(inputs)::text[]), unnest(sqlc.arg(keys)::text[]),
                    unnest(sqlc.arg(priorities)::int[]), unnest(sqlc.arg(run_ats)::timestamptz[]),
                    unnest(sqlc.arg(delays_ms)::bigint[]), unnest(sqlc.arg(concurrency_keys)::text[]),
                    unnest(sqlc.arg(rate_limits)::text[]), unnest(sqlc.arg(rate_keys)::text[]),
                    unnest(sqlc.arg(rate_weights)::int[]), unnest(sqlc.arg(max_attempts)::int[]),
                    unnest(sqlc.arg(parent_ids)::bigint[]), unnest(sqlc.arg(idempotency_keys)::text[]),
                    unnest(sqlc.arg(extra_rate_limits)::text[]), unnest(sqlc.arg(debounce_keys)::text[]),
                    unnest(sqlc.arg(debounce_periods_ms)::bigint[]), unnest(sqlc.arg(debounce_max_waits_ms)::bigint[]),
                    unnest(sqlc.arg(trace_contexts)::text[]), unnest(sqlc.arg(fairness_keys)::text[])) WITH ORDINALITY
         AS r(queue, handler, input, key, priority, run_at, delay_ms, concurrency_key, rate_limit,
              rate_key, rate_weight, max_attempts, parent_id, idempotency_key, extra_rate_limits,
              debounce_key, debounce_period_ms, debounce_max_wait_ms, trace_context, fairness_key, ord)
),
missing AS (
    SELECT 1 FROM req r
    WHERE NOT EXISTS (SELECT 1 FROM handlers h WHERE h.name = r.handler)
       OR (r.rate_limit IS NOT NULL AND NOT EXISTS (
               SELECT 1 FROM rate_limits l WHERE l.name = r.rate_limit AND l.burst >= coalesce(r.rate_weight, 1)))
       OR (r.extra_rate_limits IS NOT NULL AND EXISTS (
               SELECT 1 FROM jsonb_to_recordset(r.extra_rate_limits) AS x(name text, weight int)
               WHERE NOT EXISTS (SELECT 1 FROM rate_limits l WHERE l.name = x.name AND l.burst >= x.weight)))
       -- a fair queue's claim applies no rate limit (docs/fairness.md)
       OR ((r.rate_limit IS NOT NULL OR r.extra_rate_limits IS NOT NULL)
           AND r.queue IN (SELECT q.name FROM queues q WHERE q.fairness <> 'none'))
    LIMIT 1
),
new_queues AS (
    INSERT INTO queues (name)
    SELECT DISTINCT r.queue FROM req r
    WHERE NOT EXISTS (SELECT 1 FROM missing)
    ON CONFLICT (name) DO NOTHING
),
-- The first item of each idempotency key claims it: a new key, or one past its window.
-- A concurrent insert of the same key waits here for the other to commit and claims
-- nothing (its item answers the other's job, found by JobGetByIdempotencyKey).
claimed AS (
    INSERT INTO idempotency_keys AS k (key, job_id, expires_at)
    SELECT DISTINCT ON (r.idempotency_key) r.idempotency_key, r.id,
           coalesce(sqlc.narg(as_of)::timestamptz, now()) + sqlc.arg(idempotency_window_ms)::bigint * interval '1 millisecond'
    FROM req r
    WHERE r.idempotency_key IS NOT NULL AND NOT EXISTS (SELECT 1 FROM missing)
      AND (r.key IS NULL OR NOT EXISTS (SELECT 1 FROM jobs j WHERE j.key = r.key
                                        AND j.status IN ('runnable', 'executing', 'awaiting')))
    ORDER BY r.idempotency_key, r.ord
    ON CONFLICT (key) DO UPDATE
    SET job_id = excluded.job_id, expires_at = excluded.expires_at, created_at = now()
    WHERE k.expires_at <= coalesce(sqlc.narg(as_of)::timestamptz, now())
    RETURNING k.job_id
),
-- What each item to insert becomes: its values, its defaults and its handler's (read
-- once per item; read by both inserts below, so computed once). A job of a handler whose circuit breaker is open (or half-open) or that is paused is
-- inserted parked, as the dispatcher would park it once claimed (lease_owner
-- 'breaker:<handler>', woken by JobWakeParked when the breaker closes or the handler is
-- resumed): a dead endpoint's new work never lands in front of the queue, where every
-- feeder would first claim and park it ahead of the healthy handlers' steps (measured,
-- BenchmarkHealthyBesideADeadHandler). The batch's first item of an open breaker comes
-- back for its next probe; the others in 150-300 s, like the dispatcher's ParkFor.
to_insert AS (
    SELECT r.id, r.ord, r.queue, r.handler, coalesce(r.input, '{}'::jsonb) AS input, r.key,
           coalesce(r.priority, 5) AS priority,
           CASE WHEN h.breaker_state = 'closed' AND h.paused_at IS NULL
                THEN coalesce(r.run_at, now() + coalesce(r.delay_ms, 0) * interval '1 millisecond')
                ELSE greatest(coalesce(r.run_at, now() + coalesce(r.delay_ms, 0) * interval '1 millisecond'),
                              CASE WHEN r.ord = 0 AND h.paused_at IS NULL
                                   THEN greatest(coalesce(h.breaker_next_probe_at, now() + interval '1 second'), now())
                                   ELSE now() + interval '150 seconds' + random() * interval '150 seconds' END) END AS eligible_at,
           r.concurrency_key, r.rate_limit, r.rate_key, coalesce(r.rate_weight, 1) AS rate_weight, r.extra_rate_limits,
           coalesce(r.max_attempts, h.max_attempts) AS max_attempts, r.parent_id,
           CASE WHEN h.breaker_state <> 'closed' OR h.paused_at IS NOT NULL THEN 'breaker:' || h.name END AS lease_owner,
           r.trace_context, r.fairness_key
    FROM req r JOIN handlers h ON h.name = r.handler
    WHERE NOT EXISTS (SELECT 1 FROM missing) AND r.debounce_key IS NULL
      AND (r.idempotency_key IS NULL OR r.id IN (SELECT c.job_id FROM claimed c))
),
-- An item without a key cannot conflict: it goes in by a plain insert, without ON
-- CONFLICT's speculative insertion (a lock and a WAL record more per row, 3 ms of a
-- 5 000-job batch) and without the sort.
inserted_plain AS (
    INSERT INTO jobs (id, queue, handler, input, key, priority, eligible_at, concurrency_key,
                      rate_limit, rate_key, rate_weight, extra_rate_limits, max_attempts, parent_id, lease_owner, trace_context,
                      fairness_key)
    OVERRIDING SYSTEM VALUE
    SELECT t.id, t.queue, t.handler, t.input, t.key, t.priority, t.eligible_at, t.concurrency_key,
           t.rate_limit, t.rate_key, t.rate_weight, t.extra_rate_limits, t.max_attempts, t.parent_id, t.lease_owner, t.trace_context,
           t.fairness_key
    FROM to_insert t
    WHERE t.key IS NULL
    RETURNING id, queue, key, status, priority, eligible_at, input, max_attempts, rate_weight, created_at, lease_owner
),
-- Keyed items in request order, so that the first item of a key wins it.
inserted_keyed AS (
    INSERT INTO jobs (id, queue, handler, input, key, priority, eligible_at, concurrency_key,
                      rate_limit, rate_key, rate_weight, extra_rate_limits, max_attempts, parent_id, lease_owner, trace_context,
                      fairness_key)
    OVERRIDING SYSTEM VALUE
    SELECT t.id, t.queue, t.handler, t.input, t.key, t.priority, t.eligible_at, t.concurrency_key,
           t.rate_limit, t.rate_key, t.rate_weight, t.extra_rate_limits, t.max_attempts, t.parent_id, t.lease_owner, t.trace_context,
           t.fairness_key
    FROM to_insert t
    WHERE t.key IS NOT NULL
    ORDER BY t.ord
    ON CONFLICT (key) WHERE key IS NOT NULL AND status IN ('runnable', 'executing', 'awaiting')
    DO NOTHING
    RETURNING id, queue, key, status, priority, eligible_at, input, max_attempts, rate_weight, created_at, lease_owner
),
inserted AS (
    SELECT * FROM inserted_plain
    UNION ALL
    SELECT * FROM inserted_keyed
),
-- Debounced items (never with a key or an idempotency key): the last item of each
-- debounce key upserts the runnable, never-claimed job holding it (jobs_debounce is the
-- arbiter, so concurrent inserts of a key make one job): a new job eligible a period
-- from as_of (default now()) with a deadline max_wait from then, or the existing job
-- given this input and pushed to a period from now, never past its deadline. Empty, and
-- nearly free, for a batch without debounce.
debounced AS (
    INSERT INTO jobs AS j (id, queue, handler, input, priority, eligible_at, concurrency_key, rate_limit,
                           rate_key, rate_weight, extra_rate_limits, max_attempts, parent_id, debounce_key,
                           debounce_deadline, trace_context, fairness_key)
    OVERRIDING SYSTEM VALUE
    SELECT DISTINCT ON (r.debounce_key) r.id, r.queue, r.handler, coalesce(r.input, '{}'::jsonb), coalesce(r.priority, 5),
           coalesce(sqlc.narg(as_of)::timestamptz, now()) + r.debounce_period_ms * interval '1 millisecond',
           r.concurrency_key, r.rate_limit, r.rate_key, coalesce(r.rate_weight, 1), r.extra_rate_limits,
           coalesce(r.max_attempts, h.max_attempts), r.parent_id, r.debounce_key,
           coalesce(sqlc.narg(as_of)::timestamptz, now()) + r.debounce_max_wait_ms * interval '1 millisecond',
           r.trace_context, r.fairness_key
    FROM req r JOIN handlers h ON h.name = r.handler
    WHERE r.debounce_key IS NOT NULL AND NOT EXISTS (SELECT 1 FROM missing)
    ORDER BY r.debounce_key, r.ord DESC
    ON CONFLICT (debounce_key) WHERE debounce_key IS NOT NULL AND status = 'runnable' AND attempted_at IS NULL
    DO UPDATE SET input = excluded.input, trace_context = excluded.trace_context,
                  eligible_at = least(excluded.eligible_at, coalesce(j.debounce_deadline, excluded.eligible_at)),
                  updated_at = now()
    RETURNING j.id, j.debounce_key
),
-- notify_tag is '' or a space and the process that claims the new rows at once, which
-- the other processes' dispatchers then do not wake for (pg.WorkNotice).
notified AS (
    SELECT count(pg_notify('gendurable_jobs', q.queue || sqlc.arg(notify_tag)::text)) AS n
    FROM (SELECT DISTINCT queue FROM inserted WHERE eligible_at <= now()) q
)
-- The pre-existing rows first: their NULLs make the answer's columns nullable.
SELECT 'existing'::text AS origin, -1::int AS ord, NULL::text AS idempotency_key, j.id, j.key,
       NULL::text AS debounce_key, NULL::text AS status, NULL::smallint AS priority,
       NULL::timestamptz AS eligible_at, NULL::jsonb AS input, NULL::int AS max_attempts,
       NULL::int AS rate_weight, NULL::timestamptz AS created_at, NULL::text AS lease_owner
-- Driven by the requested keys (one jobs_live_key probe each, nothing without keys; OFFSET
-- 0 keeps the planner from turning it back into a join that reads jobs): a semi-join
-- from jobs was a nested loop over every live job, rescanning the request per row, under
-- a plan made while the table was small (4.4 s for 10 000 items beside 10 000 jobs).
FROM (SELECT DISTINCT r.key FROM req r WHERE r.key IS NOT NULL) rk
CROSS JOIN LATERAL (SELECT j.id, j.key FROM jobs j
                    WHERE j.key = rk.key AND j.status IN ('runnable', 'executing', 'awaiting')
                    OFFSET 0) j
UNION ALL
SELECT 'idempotent', -1, k.key, k.job_id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM (SELECT DISTINCT r.idempotency_key FROM req r WHERE r.idempotency_key IS NOT NULL) ri
CROSS JOIN LATERAL (SELECT k.key, k.job_id FROM idempotency_keys k
                    WHERE k.key = ri.idempotency_key
                      AND k.expires_at > coalesce(sqlc.narg(as_of)::timestamptz, now())
                    OFFSET 0) k
UNION ALL
SELECT 'inserted', r.ord::int, r.idempotency_key, i.id, i.key, NULL, i.status, i.priority, i.eligible_at,
       i.input, i.max_attempts, i.rate_weight, i.created_at, i.lease_owner
FROM inserted i
JOIN req r ON r.id = i.id, notified
UNION ALL
-- Every debounced item answers the job of its key: 'debounce_new' for the item whose id
-- made a new job, 'debounce_hit' for the others.
SELECT CASE WHEN d.id = r.id THEN 'debounce_new' ELSE 'debounce_hit' END, r.ord::int, NULL, d.id, NULL,
       d.debounce_key, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM debounced d
JOIN req r ON r.debounce_key = d.debounce_key;

-- name: JobInsertPlain :many
-- Inserts a batch of plain jobs: no item has a live key, an idempotency key, a debounce
-- key or a rate limit (JobInsertManyWith sends any other batch to JobInsertMany). It
-- writes what JobInsertMany writes for such a batch (TestPlainInsertWritesWhatTheGeneralInsertWrites)
-- without that statement's dedup, idempotency, debounce and rate-limit branches: at
-- 5 000 jobs, 35 ms of execution against 45 (the fastest of 30 EXPLAIN ANALYZE runs
-- each). The arrays are read in lockstep in the select list (a ProjectSet, where ROWS
-- FROM first copies each array into a tuplestore); an optional column no item sets is a
-- NULL array, read as NULLs. The batch's handlers are read once; one unknown handler
-- refuses the whole batch (`missing`), and nothing is written. The inputs are text cast
-- to jsonb, as in JobInsertMany. A paused handler's or an open breaker's job goes in
-- parked, as in JobInsertMany (the eligible time and the parking are its to_insert
-- expressions written out again; the test above holds the two statements to the same
-- rows). Ids are drawn in request order in `req`, so the answer is each inserted row,
-- without its request position: item k's job is the k-th smallest id. Joining the
-- answer back to `req` for the position sorted both sides, 2 of 36 ms at 5 000 jobs.
-- Index use: handlers_pkey per distinct handler, queues_pkey per distinct queue.
-- Cost: one heap insert + its index entries per job.
WITH req AS (
    SELECT r.ord, r.queue, r.handler, nullif(r.input, '')::jsonb AS input, nullif(r.priority, -1)::smallint AS priority,
           nullif(r.run_at, '0001-01-01 00:00:00+00'::timestamptz) AS run_at, r.delay_ms,
           nullif(r.max_attempts, 0) AS max_attempts, nullif(r.concurrency_key, '') AS concurrency_key,
           nullif(r.parent_id, 0) AS parent_id, nullif(r.trace_context, '') AS trace_context,
           coalesce(nullif(r.fairness_key, ''), CASE WHEN r.queue IN (SELECT q.name FROM queues q WHERE q.fairness <> 'none') THEN '' END) AS fairness_key,
           nextval((SELECT pg_get_serial_sequence('jobs', 'id'))::regclass) AS id
    FROM (SELECT generate_series(0, cardinality(sqlc.arg(handlers)::text[]) - 1) AS ord,
                 unnest(sqlc.arg(queues)::text[]) AS queue, unnest(sqlc.arg(handlers)::text[]) AS handler,
                 unnest(sqlc.arg(inputs)::text[]) AS input, unnest(sqlc.arg(priorities)::int[]) AS priority,
                 unnest(sqlc.arg(run_ats)::timestamptz[]) AS run_at, unnest(sqlc.arg(delays_ms)::bigint[]) AS delay_ms,
                 unnest(sqlc.arg(max_attempts)::int[]) AS max_attempts,
                 unnest(sqlc.arg(concurrency_keys)::text[]) AS concurrency_key,
                 unnest(sqlc.arg(parent_ids)::bigint[]) AS parent_id,
                 unnest(sqlc.arg(trace_contexts)::text[]) AS trace_context,
                 unnest(sqlc.arg(fairness_keys)::text[]) AS fairness_key) r
),
batch_handlers AS (
    SELECT h.name, h.max_attempts, h.breaker_state, h.paused_at, h.breaker_next_probe_at
    FROM handlers h
    WHERE h.name IN (SELECT DISTINCT r.handler FROM req r)
),
missing AS (
    SELECT 1 FROM req r WHERE NOT EXISTS (SELECT 1 FROM batch_handlers h WHERE h.name = r.handler) LIMIT 1
),
new_queues AS (
    INSERT INTO queues (name)
    SELECT DISTINCT r.queue FROM req r
    WHERE NOT EXISTS (SELECT 1 FROM missing)
    ON CONFLICT (name) DO NOTHING
),
inserted AS (
    INSERT INTO jobs (id, queue, handler, input, priority, eligible_at, concurrency_key, max_attempts, parent_id, lease_owner,
                      trace_context, fairness_key)
    OVERRIDING SYSTEM VALUE
    SELECT r.id, r.queue, r.handler, coalesce(r.input, '{}'::jsonb), coalesce(r.priority, 5),
           CASE WHEN h.breaker_state = 'closed' AND h.paused_at IS NULL
                THEN coalesce(r.run_at, now() + coalesce(r.delay_ms, 0) * interval '1 millisecond')
                ELSE greatest(coalesce(r.run_at, now() + coalesce(r.delay_ms, 0) * interval '1 millisecond'),
                              CASE WHEN r.ord = 0 AND h.paused_at IS NULL
                                   THEN greatest(coalesce(h.breaker_next_probe_at, now() + interval '1 second'), now())
                                   ELSE now() + interval '150 seconds' + random() * interval '150 seconds' END) END,
           r.concurrency_key, coalesce(r.max_attempts, h.max_attempts), r.parent_id,
           CASE WHEN h.breaker_state <> 'closed' OR h.paused_at IS NOT NULL THEN 'breaker:' || h.name END,
           r.trace_context, r.fairness_key
    FROM req r JOIN batch_handlers h ON h.name = r.handler
    WHERE NOT EXISTS (SELECT 1 FROM missing)
    RETURNING id, queue, status, priority, eligible_at, input, max_attempts, rate_weight, created_at, lease_owner
),
-- notify_tag is '' or a space and the process that claims the new rows at once, which
-- the other processes' dispatchers then do not wake for (pg.WorkNotice).
notified AS (
    SELECT count(pg_notify('gendurable_jobs', q.queue || sqlc.arg(notify_tag)::text)) AS n
    FROM (SELECT DISTINCT queue FROM inserted WHERE eligible_at <= now()) q
)
SELECT i.id, i.status, i.priority, i.eligible_at, i.input, i.max_attempts, i.rate_weight,
       i.created_at, i.lease_owner
FROM inserted i, notified;

-- name: JobGetMany :many
-- The jobs of ids (jobs_pkey), in no particular order.
SELECT j.* FROM jobs j WHERE j.id = ANY (sqlc.arg(ids)::bigint[]);

-- name: JobInsertProblems :many
-- Why JobInsertMany refused a batch (its error path only): for each item, an unknown
-- handler, an unknown rate limit, or a weight that can never fit the burst of the limit.
-- The first rate limit of an item is named rate_limit/…, its extra ones rate_limits/N/…
-- (N counting the first as 0).
WITH req AS (
    SELECT r.ord - 1 AS ord, r.handler, nullif(r.rate_limit, '') AS rate_limit, nullif(r.rate_weight, 0) AS rate_weight,
           nullif(r.extra_rate_limits, '')::jsonb AS extra_rate_limits, r.queue
    FROM ROWS FROM (unnest(sqlc.arg(handlers)::text[]), unnest(sqlc.arg(rate_limits)::text[]),
                    unnest(sqlc.arg(rate_weights)::int[]), unnest(sqlc.arg(extra_rate_limits)::text[]),
                    unnest(sqlc.arg(queues)::text[])) WITH ORDINALITY
         AS r(handler, rate_limit, rate_weight, extra_rate_limits, queue, ord)
),
extra AS (
    SELECT r.ord, 'rate_limits/' || x.n AS field, x.e ->> 'name' AS name, (x.e ->> 'weight')::int AS weight
    FROM req r
    CROSS JOIN LATERAL jsonb_array_elements(r.extra_rate_limits) WITH ORDINALITY AS x(e, n)
    WHERE r.extra_rate_limits IS NOT NULL
)
SELECT r.ord::int AS ord, 'handler'::text AS field,
       ('no handler named "' || r.handler || '" is registered (PUT /v1/handlers/' || r.handler || ' first)')::text AS message
FROM req r
WHERE NOT EXISTS (SELECT 1 FROM handlers h WHERE h.name = r.handler)
UNION ALL
SELECT r.ord, 'rate_limit/name', 'no rate limit named "' || r.rate_limit || '" exists (PUT /v1/rate-limits/' || r.rate_limit || ' first)'
FROM req r
WHERE r.rate_limit IS NOT NULL AND NOT EXISTS (SELECT 1 FROM rate_limits l WHERE l.name = r.rate_limit)
UNION ALL
SELECT r.ord, 'rate_limit/weight', 'weight ' || coalesce(r.rate_weight, 1) || ' can never fit: rate limit "' || l.name || '" has burst ' || l.burst
FROM req r
JOIN rate_limits l ON l.name = r.rate_limit
WHERE l.burst < coalesce(r.rate_weight, 1)
UNION ALL
SELECT e.ord, e.field || '/name', 'no rate limit named "' || e.name || '" exists (PUT /v1/rate-limits/' || e.name || ' first)'
FROM extra e
WHERE NOT EXISTS (SELECT 1 FROM rate_limits l WHERE l.name = e.name)
UNION ALL
SELECT e.ord, e.field || '/weight', 'weight ' || e.weight || ' can never fit: rate limit "' || l.name || '" has burst ' || l.burst
FROM extra e
JOIN rate_limits l ON l.name = e.name
WHERE l.burst < e.weight
UNION ALL
SELECT r.ord, CASE WHEN r.rate_limit IS NOT NULL THEN 'rate_limit' ELSE 'rate_limits' END,
       'queue "' || r.queue || '" is fair (fairness round_robin): its claims apply no rate limit; '
       || 'cap the fairness key instead (PUT /v1/queues/' || r.queue || '/fairness-keys/{key})'
FROM req r
WHERE (r.rate_limit IS NOT NULL OR r.extra_rate_limits IS NOT NULL)
  AND r.queue IN (SELECT q.name FROM queues q WHERE q.fairness <> 'none')
ORDER BY 1, 2;

-- name: JobGet :one
-- One job by primary key, with its inbox and children counts (jobs_parent, signals_inbox).
SELECT sqlc.embed(j),
       (SELECT count(*) FROM jobs c WHERE c.parent_id = j.id) AS children_total,
       (SELECT count(*) FROM jobs c WHERE c.parent_id = j.id
                                      AND c.status IN ('done', 'failed', 'cancelled')) AS children_finished
FROM jobs j
WHERE j.id = sqlc.arg(id)::bigint;

-- name: JobList :many
-- Newest first with keyset pagination on id (before_id = last id seen). Filters are optional.
-- A backward scan of jobs_pkey that stops after max_rows matching rows; a very selective
-- filter on a large table reads more (see docs/performance.md). A search by payload
-- (input_contains, result_contains: jsonb containment) comes with a time window
-- (created_after, created_before) that the caller has turned into ids (min_id, and
-- before_id for its end: ids grow with time), so the scan stays within the window's rows.
SELECT j.*
FROM jobs j
WHERE (sqlc.narg(queue)::text IS NULL OR j.queue = sqlc.narg(queue))
  -- The id bounds are written to be index conditions under a generic plan too (an
  -- `$x IS NULL OR id < $x` is only a filter there, and the scan would not stop).
  AND j.id >= coalesce(sqlc.narg(min_id)::bigint, 0)
  AND j.id < coalesce(sqlc.narg(before_id)::bigint, 9223372036854775807)
  AND (sqlc.narg(created_after)::timestamptz IS NULL OR j.created_at >= sqlc.narg(created_after))
  AND (sqlc.narg(created_before)::timestamptz IS NULL OR j.created_at < sqlc.narg(created_before))
  AND (sqlc.narg(input_contains)::jsonb IS NULL OR j.input @> sqlc.narg(input_contains))
  AND (sqlc.narg(result_contains)::jsonb IS NULL OR j.result @> sqlc.narg(result_contains))
  AND (sqlc.narg(status)::text IS NULL OR j.status = sqlc.narg(status))
  AND (sqlc.narg(handler)::text IS NULL OR j.handler = sqlc.narg(handler))
  AND (sqlc.narg(job_key)::text IS NULL OR j.key = sqlc.narg(job_key))
  AND (sqlc.narg(parent_id)::bigint IS NULL OR j.parent_id = sqlc.narg(parent_id))
  AND (sqlc.narg(schedule_name)::text IS NULL OR j.schedule_name = sqlc.narg(schedule_name))
  AND (sqlc.narg(fairness_key)::text IS NULL OR j.fairness_key = sqlc.narg(fairness_key))
ORDER BY j.id DESC
LIMIT sqlc.arg(max_rows)::int;

-- name: JobGetLiveByKey :one
-- The live job holding key job_key (jobs_live_key).
SELECT j.*
FROM jobs j
WHERE j.key = sqlc.arg(job_key)::text AND j.status IN ('runnable', 'executing', 'awaiting');

-- name: JobGetByIdempotencyKey :one
-- The job an unexpired idempotency key points to (idempotency_keys_pkey, jobs_pkey): the
-- rare path of an insert that lost its key to a concurrent insert of the same key.
SELECT j.*
FROM idempotency_keys k
JOIN jobs j ON j.id = k.job_id
WHERE k.key = sqlc.arg(idempotency_key)::text AND k.expires_at > coalesce(sqlc.narg(as_of)::timestamptz, now());

-- name: ChildLoadForJoin :many
-- The children shown to each claimed parent that just joined them: at most per_parent per
-- parent (oldest first) plus the parent's total. One statement per pick batch; a range
-- scan of jobs_parent per parent.
SELECT p.id::bigint AS parent_id, c.id, c.handler, c.key, c.status, c.result, c.error,
       (SELECT count(*) FROM jobs n WHERE n.parent_id = p.id) AS total
FROM unnest(sqlc.arg(parent_ids)::bigint[]) AS p(id)
CROSS JOIN LATERAL (
    SELECT c.id, c.handler, c.key, c.status, c.result, c.error
    FROM jobs c
    WHERE c.parent_id = p.id
    ORDER BY c.id
    LIMIT sqlc.arg(per_parent)::int
) c
ORDER BY p.id, c.id;

-- name: JobTablePages :one
-- The size of jobs in pages, as the planner reads it (not the statistics): what
-- ReplanIfGrown compares with the size the pool's plans were made at.
SELECT (pg_relation_size('jobs') / current_setting('block_size')::bigint)::bigint AS pages;

-- name: JobFirstFrom :one
-- The first job with an id at or after from_id, and when it was created: one probe of
-- jobs_pkey. The list's search turns a time into an id with a binary search of these
-- (ids grow with time), about 20 probes at a million jobs.
SELECT j.id, j.created_at FROM jobs j WHERE j.id >= sqlc.arg(from_id)::bigint ORDER BY j.id LIMIT 1;

-- name: JobIDBounds :one
-- The least and greatest job ids (0, 0 when there is none): two probes of jobs_pkey.
SELECT coalesce(min(j.id), 0)::bigint AS min_id, coalesce(max(j.id), 0)::bigint AS max_id FROM jobs j;

-- name: JobFlowList :many
-- The concurrency key and first rate limit of the jobs ids names (those StepWindowOfQueue
-- found), and of the executing jobs that hold concurrency_key or draw from the bucket
-- (rate_limit, rate_key): who else held the key's slots or the bucket's tokens while a
-- run waited (engine.JobWaits). The first arm: a primary-key probe per id; the second:
-- the executing rows of jobs_lease (the jobs in flight), at most max_rows. On Citus each
-- arm runs on every shard.
(SELECT j.id, j.concurrency_key, j.rate_limit, j.rate_key, j.rate_weight, j.status, j.attempted_at
 FROM jobs j
 WHERE j.id = ANY(sqlc.arg(ids)::bigint[]))
UNION ALL
(SELECT j.id, j.concurrency_key, j.rate_limit, j.rate_key, j.rate_weight, j.status, j.attempted_at
 FROM jobs j
 WHERE j.status = 'executing'
   AND (j.concurrency_key = sqlc.narg(concurrency_key)::text
        OR (j.rate_limit = sqlc.narg(rate_limit)::text AND j.rate_key IS NOT DISTINCT FROM sqlc.narg(rate_key)::text))
 LIMIT sqlc.arg(max_rows)::int);
