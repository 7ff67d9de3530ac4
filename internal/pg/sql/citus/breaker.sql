-- The circuit breaker on Citus (sql/breaker.sql, docs/flow-control.md). handlers is a
-- reference table, written on every node, and Citus refuses there what it refuses in any
-- UPDATE: a non-immutable function inside CASE or COALESCE, and a stable one applied to a
-- column (timestamptz + interval). So the clock is read in a CTE (`n`, as a UTC timestamp)
-- and the times are computed in UTC, where the arithmetic is immutable; and the lock that
-- makes concurrent tallies add up is a statement of its own (HandlerBreakerLock, in the
-- same transaction), as Citus does not run a locking CTE joined to the tallies.

-- name: HandlerBreakerLock :many
-- Locks the handlers of a tally in name order (no deadlock between two batches) and
-- answers their breaker state before the tally. Index use: handlers_pkey.
SELECT h.name, h.breaker_state FROM handlers h
WHERE h.name = ANY (sqlc.arg(names)::text[])
ORDER BY h.name
FOR UPDATE;

-- name: HandlerBreakerRecord :many
-- HandlerBreakerRecord (sql/breaker.sql) under HandlerBreakerLock: the caller compares
-- the states it locked with the states answered to tell which breakers this opened.
WITH t AS (
    SELECT * FROM ROWS FROM (unnest(sqlc.arg(names)::text[]), unnest(sqlc.arg(failures)::int[]),
                             unnest(sqlc.arg(resets)::bool[])) AS t(name, failures, reset)
),
n AS (
    SELECT coalesce(sqlc.narg(now)::timestamptz, now()) AT TIME ZONE 'UTC' AS at
)
UPDATE handlers h
SET consecutive_failures = CASE WHEN t.reset THEN 0 ELSE h.consecutive_failures END + t.failures,
    breaker_state = CASE WHEN h.breaker_state = 'closed' AND h.breaker_threshold > 0
                          AND CASE WHEN t.reset THEN 0 ELSE h.consecutive_failures END + t.failures >= h.breaker_threshold
                         THEN 'open' ELSE h.breaker_state END,
    breaker_opened_at = CASE WHEN h.breaker_state = 'closed' AND h.breaker_threshold > 0
                              AND CASE WHEN t.reset THEN 0 ELSE h.consecutive_failures END + t.failures >= h.breaker_threshold
                             THEN n.at AT TIME ZONE 'UTC' ELSE h.breaker_opened_at END,
    breaker_next_probe_at = CASE WHEN h.breaker_state = 'closed' AND h.breaker_threshold > 0
                                  AND CASE WHEN t.reset THEN 0 ELSE h.consecutive_failures END + t.failures >= h.breaker_threshold
                                 THEN (n.at + h.breaker_probe_ms * interval '1 millisecond') AT TIME ZONE 'UTC'
                                 ELSE h.breaker_next_probe_at END,
    breaker_probes = CASE WHEN h.breaker_state = 'closed' AND h.breaker_threshold > 0
                           AND CASE WHEN t.reset THEN 0 ELSE h.consecutive_failures END + t.failures >= h.breaker_threshold
                          THEN 0 ELSE h.breaker_probes END,
    breaker_opens = h.breaker_opens + CASE WHEN h.breaker_state = 'closed' AND h.breaker_threshold > 0
                                            AND CASE WHEN t.reset THEN 0 ELSE h.consecutive_failures END + t.failures >= h.breaker_threshold
                                           THEN 1 ELSE 0 END
FROM t, n
WHERE h.name = t.name AND h.name = ANY (sqlc.arg(names)::text[])
  AND (t.failures > 0 OR h.consecutive_failures > 0)
RETURNING h.name, h.breaker_state, h.consecutive_failures;

-- name: HandlerBreakerProbe :one
-- HandlerBreakerProbe (sql/breaker.sql): the one caller whose UPDATE moves a due open
-- breaker to half_open wins the probe; a breaker open longer than its pause_after is
-- paused instead (the caller then writes the reason: HandlerBreakerPausedReason). No row
-- when the breaker is not due (or not open); the caller then reads the handler.
WITH n AS (
    SELECT coalesce(sqlc.narg(now)::timestamptz, now()) AT TIME ZONE 'UTC' AS at
)
UPDATE handlers h
SET breaker_state = CASE WHEN h.breaker_pause_after_ms > 0
                              AND (h.breaker_opened_at AT TIME ZONE 'UTC') + h.breaker_pause_after_ms * interval '1 millisecond' <= n.at
                         THEN h.breaker_state ELSE 'half_open' END,
    breaker_next_probe_at = CASE WHEN h.breaker_pause_after_ms > 0
                                      AND (h.breaker_opened_at AT TIME ZONE 'UTC') + h.breaker_pause_after_ms * interval '1 millisecond' <= n.at
                                 THEN h.breaker_next_probe_at
                                 ELSE (n.at + (h.timeout_ms + 30000) * interval '1 millisecond') AT TIME ZONE 'UTC' END,
    paused_at = CASE WHEN h.breaker_pause_after_ms > 0
                          AND (h.breaker_opened_at AT TIME ZONE 'UTC') + h.breaker_pause_after_ms * interval '1 millisecond' <= n.at
                     THEN n.at AT TIME ZONE 'UTC' END
FROM n
WHERE h.name = sqlc.arg(name)
  AND h.breaker_state <> 'closed'
  AND h.paused_at IS NULL
  AND (h.breaker_next_probe_at AT TIME ZONE 'UTC') <= n.at
RETURNING h.breaker_state, h.breaker_next_probe_at, h.paused_at, h.breaker_opened_at, h.breaker_pause_after_ms;

-- name: HandlerBreakerState :one
-- A handler's breaker as it is (a reference table, read on the coordinator).
SELECT h.breaker_state, h.breaker_next_probe_at, h.paused_at FROM handlers h WHERE h.name = sqlc.arg(name);

-- name: HandlerBreakerPausedReason :exec
-- Why a handler was paused, written by the caller that paused it (HandlerBreakerProbe).
UPDATE handlers h SET paused_reason = sqlc.arg(reason)::text
WHERE h.name = sqlc.arg(name) AND h.paused_at IS NOT NULL;

-- name: HandlerBreakerProbeResult :one
-- HandlerBreakerProbeResult (sql/breaker.sql): a success closes the breaker; a failure
-- opens it again with the next probe breaker_probe_ms × 2^probes later, capped.
WITH n AS (
    SELECT coalesce(sqlc.narg(now)::timestamptz, now()) AT TIME ZONE 'UTC' AS at
)
UPDATE handlers h
SET breaker_state = CASE WHEN sqlc.arg(success)::bool THEN 'closed' ELSE 'open' END,
    consecutive_failures = CASE WHEN sqlc.arg(success)::bool THEN 0 ELSE h.consecutive_failures + 1 END,
    breaker_probes = CASE WHEN sqlc.arg(success)::bool THEN 0 ELSE h.breaker_probes + 1 END,
    breaker_opened_at = CASE WHEN sqlc.arg(success)::bool THEN NULL ELSE h.breaker_opened_at END,
    breaker_next_probe_at = CASE WHEN sqlc.arg(success)::bool THEN NULL
        ELSE (n.at + least(h.breaker_probe_max_ms::float8,
                           h.breaker_probe_ms::float8 * power(2, least(h.breaker_probes + 1, 40))) * interval '1 millisecond')
             AT TIME ZONE 'UTC'
        END
FROM n
WHERE h.name = sqlc.arg(name) AND h.breaker_state = 'half_open'
RETURNING h.breaker_state, h.breaker_next_probe_at;

-- name: LeaseParkMany :many
-- LeaseParkMany (sql/breaker.sql) for the leases of one shard: claimed steps of a handler
-- whose breaker is open given back without calling it, runnable at their own time, the
-- attempt undone, marked 'breaker:<handler>' for JobWakeParked. Fenced by (id, token).
WITH l AS (
    SELECT * FROM ROWS FROM (unnest(sqlc.arg(ids)::bigint[]), unnest(sqlc.arg(tokens)::uuid[]),
                             unnest(sqlc.arg(eligible_ats)::timestamptz[])) AS l(id, token, eligible_at)
)
UPDATE jobs j
SET status = 'runnable',
    attempt = greatest(j.attempt - 1, 0),
    eligible_at = l.eligible_at,
    lease_token = NULL,
    lease_expires_at = NULL,
    lease_owner = 'breaker:' || j.handler,
    gate_shard = NULL,
    late_signals = NULL,
    updated_at = now()
FROM l
WHERE j.placement = ANY (sqlc.arg(placements)::int[])
  AND j.id = l.id
  AND j.lease_token = l.token
  AND j.id = ANY (sqlc.arg(ids)::bigint[])
RETURNING j.id;

-- name: JobWakeParked :many
-- JobWakeParked (sql/breaker.sql) on every shard at once (a fan-out, rare: a breaker
-- closed or a handler resumed): the steps its breaker parked, due now. Answers their
-- queues; the caller wakes them on the coordinator. Index use: jobs_breaker_parked.
UPDATE jobs j
SET eligible_at = now(), lease_owner = NULL, updated_at = now()
WHERE j.status = 'runnable' AND j.lease_owner = 'breaker:' || sqlc.arg(handler)::text
RETURNING j.queue;
