-- Idempotency keys and debounce on Citus (docs/citus.md, "Placement"): each lives at the
-- placement of its key (PlacementOfKey), where its unique index is exact, so every
-- statement here is a router statement at one placement. The clock is read in the
-- VALUES, which Citus evaluates on the coordinator before it routes the row (it refuses
-- now() in an ON CONFLICT ... DO UPDATE of a distributed table).

-- name: IdempotencyClaim :one
-- Claims idempotency key for job_id (drawn by the caller, inserted in the same
-- transaction): a new key, or one past its window, re-pointed. A concurrent insert of
-- the same key waits here for the other to commit and claims nothing: no row, and the
-- caller answers the holder (IdempotencyHolder). Index use: idempotency_keys_pkey.
INSERT INTO idempotency_keys AS k (key, placement, job_id, expires_at, created_at)
VALUES (sqlc.arg(idempotency_key)::text, sqlc.arg(placement)::int, sqlc.arg(job_id)::bigint,
        coalesce(sqlc.narg(as_of)::timestamptz, now()) + sqlc.arg(window_ms)::bigint * interval '1 millisecond',
        coalesce(sqlc.narg(as_of)::timestamptz, now()))
ON CONFLICT (key, placement) DO UPDATE
SET job_id = excluded.job_id, expires_at = excluded.expires_at, created_at = excluded.created_at
WHERE k.expires_at <= excluded.created_at
RETURNING k.job_id;

-- name: IdempotencyHolder :one
-- The job an unexpired idempotency key points to. Index use: idempotency_keys_pkey.
SELECT k.job_id FROM idempotency_keys k
WHERE k.placement = sqlc.arg(placement)::int AND k.key = sqlc.arg(idempotency_key)::text
  AND k.expires_at > coalesce(sqlc.narg(as_of)::timestamptz, now());

-- name: JobDebounceUpsert :one
-- JobInsertMany's debounced insert (sql/jobs.sql) for one debounce key at its job's
-- placement (the debounce key's, or its fairness or concurrency key's: then the caller
-- found no pending job of the key elsewhere, DebouncePending, and writes the holder row):
-- a new job eligible a period from as_of (default now()) with a deadline max_wait from
-- then (NULL: none), or the runnable, never-claimed job of the key given this input and
-- pushed to a period from now, never past its deadline. jobs_debounce is the arbiter, so
-- concurrent inserts of a key make one job. The id is drawn by the caller: the answer's
-- id is that id when this statement made the job. Index use: jobs_debounce.
INSERT INTO jobs AS j (id, placement, queue, handler, input, priority, eligible_at, max_attempts,
                       debounce_key, debounce_deadline, updated_at, trace_context, fairness_key,
                       rate_limit, rate_key, rate_weight, rate_placement, extra_rate_limits, concurrency_key)
VALUES (sqlc.arg(id)::bigint, sqlc.arg(placement)::int, sqlc.arg(queue)::text, sqlc.arg(handler)::text,
        sqlc.arg(input)::jsonb, sqlc.arg(priority)::smallint,
        coalesce(sqlc.narg(as_of)::timestamptz, now()) + sqlc.arg(period_ms)::bigint * interval '1 millisecond',
        sqlc.arg(max_attempts)::int, sqlc.arg(debounce_key)::text,
        coalesce(sqlc.narg(as_of)::timestamptz, now()) + nullif(sqlc.arg(max_wait_ms)::bigint, 0) * interval '1 millisecond',
        now(), sqlc.narg(trace_context)::text,
        -- its own, or '' in a fair queue (the caller's: Citus refuses a subquery in an INSERT)
        sqlc.narg(fairness_key)::text,
        -- a rate limit: its claimer debits its buckets when rate_placement names the first
        -- (-1: the claim does, at the job's own placement), as JobInsert
        sqlc.narg(rate_limit)::text, sqlc.narg(rate_key)::text, sqlc.arg(rate_weight)::int,
        nullif(sqlc.arg(rate_placement)::int, -1), nullif(sqlc.arg(extra_rate_limits)::text, '')::jsonb,
        -- a concurrency key places the job (its debounce key is then displaced)
        sqlc.narg(concurrency_key)::text)
ON CONFLICT (debounce_key, placement) WHERE debounce_key IS NOT NULL AND status = 'runnable' AND attempted_at IS NULL
DO UPDATE SET input = excluded.input, trace_context = excluded.trace_context,
              eligible_at = least(excluded.eligible_at, coalesce(j.debounce_deadline, excluded.eligible_at)),
              updated_at = excluded.updated_at
RETURNING j.id;

-- Displaced keys (docs/citus.md, "Displaced keys"; migrations/citus/0029): a job with a
-- key and a concurrency key or a rate limit lives where those place it, and key_holders,
-- at its key's placement, names it. Each insert and revival of a keyed job takes its
-- keys' locks (KeysLock) and then reads both holders of each key (KeysLive, KeyHoldersGet,
-- JobsLiveByID for the jobs the holder rows name).

-- name: KeysLock :exec
-- Takes the transaction lock of each key of one kind on the coordinator (where every
-- insert and revival of a keyed job runs), in one order so that two batches never wait
-- on each other; gendurable_enqueue takes the same. The kinds: keys (lockKeys,
-- 1734634361 is 'gdky') and debounce keys (lockDebounceKeys, 1734632546 is 'gddb').
SELECT count(pg_advisory_xact_lock(sqlc.arg(kind)::int, l.id))
FROM (SELECT DISTINCT hashtext(k) AS id FROM unnest(sqlc.arg(keys)::text[]) AS k ORDER BY 1) l;

-- name: KeysLive :many
-- The live jobs with one of keys at the placements given (each key's own): a read of the
-- shards of those placements, filtered by the caller to the pairs asked for.
SELECT j.placement, j.key::text AS key, j.id FROM jobs j
WHERE j.placement = ANY (sqlc.arg(placements)::int[]) AND j.key = ANY (sqlc.arg(keys)::text[])
  AND j.status IN ('runnable', 'executing', 'awaiting');

-- name: KeyHoldersGet :many
-- The holder rows of keys at the placements given (each key's own), filtered by the
-- caller to the pairs asked for.
SELECT h.placement, h.key, h.job_id FROM key_holders h
WHERE h.placement = ANY (sqlc.arg(placements)::int[]) AND h.key = ANY (sqlc.arg(keys)::text[]);

-- name: JobsLiveByID :many
-- Which of the jobs ids (at their placements, id mod 1024) are live, with their keys.
SELECT j.id, j.key::text AS key FROM jobs j
WHERE j.placement = ANY (sqlc.arg(placements)::int[]) AND j.id = ANY (sqlc.arg(ids)::bigint[])
  AND j.key IS NOT NULL AND j.status IN ('runnable', 'executing', 'awaiting');

-- name: KeyHoldersPut :exec
-- Names job_ids as the holders of keys at the keys' placements (the caller holds the
-- keys' locks and found no live holder).
INSERT INTO key_holders AS h (placement, key, job_id)
SELECT k.placement, k.key, k.job_id
FROM ROWS FROM (unnest(sqlc.arg(placements)::int[]), unnest(sqlc.arg(keys)::text[]), unnest(sqlc.arg(job_ids)::bigint[]))
     AS k(placement, key, job_id)
ON CONFLICT (key, placement) DO UPDATE SET job_id = excluded.job_id;

-- name: JobKey :one
-- The key of job id at its placement (a router read; NULL: none).
SELECT j.key FROM jobs j WHERE j.placement = sqlc.arg(placement)::int AND j.id = sqlc.arg(id)::bigint;

-- Displaced debounce keys (docs/citus.md, "Displaced keys"; migrations/citus/0032): a
-- debounced job that its fairness key or its concurrency key places lives there, and
-- debounce_holders, at its debounce key's placement, names it. Every debounced insert
-- takes its debounce keys' locks (KeysLock), reads their holder rows
-- (DebounceHoldersGet) and, when a row names a job or the insert's job would live
-- elsewhere, the keys' pending jobs (DebouncePending); a pending job found is given the
-- insert (JobDebounceHit), else JobDebounceUpsert makes the job (and DebounceHoldersPut
-- its holder row when it is displaced).

-- name: DebounceHoldersGet :many
-- The holder rows of debounce keys at the placements given (each key's own), filtered by
-- the caller to the pairs asked for.
SELECT h.placement, h.debounce_key, h.job_id FROM debounce_holders h
WHERE h.placement = ANY (sqlc.arg(placements)::int[]) AND h.debounce_key = ANY (sqlc.arg(keys)::text[]);

-- name: DebouncePending :many
-- The runnable, never-claimed jobs with one of keys at the placements given (each key's
-- own, and where its holder rows point), filtered by the caller. Index use: jobs_debounce.
SELECT j.placement, j.debounce_key::text AS debounce_key, j.id FROM jobs j
WHERE j.placement = ANY (sqlc.arg(placements)::int[]) AND j.debounce_key = ANY (sqlc.arg(keys)::text[])
  AND j.status = 'runnable' AND j.attempted_at IS NULL;

-- name: JobDebounceHit :one
-- Gives the pending job id of a debounce key a debounced insert (the caller holds the
-- key's lock): the insert's input, eligible a period from as_of (default now()), never
-- past its deadline, as JobDebounceUpsert's conflict does. No row when the job was
-- claimed meanwhile (the key is then free). The clock is read in target: Citus refuses
-- a stable function beside a column in SET.
WITH target AS (
    SELECT j.id, coalesce(sqlc.narg(as_of)::timestamptz, now()) AS now,
           least(coalesce(sqlc.narg(as_of)::timestamptz, now()) + sqlc.arg(period_ms)::bigint * interval '1 millisecond',
                 coalesce(j.debounce_deadline,
                          coalesce(sqlc.narg(as_of)::timestamptz, now()) + sqlc.arg(period_ms)::bigint * interval '1 millisecond'))
               AS eligible_at
    FROM jobs j
    WHERE j.placement = sqlc.arg(placement)::int AND j.id = sqlc.arg(id)::bigint
      AND j.status = 'runnable' AND j.attempted_at IS NULL
    FOR UPDATE
)
UPDATE jobs j
SET input = sqlc.arg(input)::jsonb, trace_context = sqlc.narg(trace_context)::text, eligible_at = t.eligible_at,
    updated_at = t.now
FROM target t
WHERE j.placement = sqlc.arg(placement)::int AND j.id = t.id
RETURNING j.id;

-- name: DebounceHoldersPut :exec
-- Names job_ids as the pending jobs of debounce keys at the keys' placements (the caller
-- holds the keys' locks and found no pending job).
INSERT INTO debounce_holders AS h (placement, debounce_key, job_id)
SELECT k.placement, k.debounce_key, k.job_id
FROM ROWS FROM (unnest(sqlc.arg(placements)::int[]), unnest(sqlc.arg(keys)::text[]), unnest(sqlc.arg(job_ids)::bigint[]))
     AS k(placement, debounce_key, job_id)
ON CONFLICT (debounce_key, placement) DO UPDATE SET job_id = excluded.job_id;
