-- The circuit breaker of each handler (migrations/0010_circuit_breaker.sql,
-- docs/flow-control.md "Circuit breaker"). Every statement takes now as a parameter
-- (NULL: the database's now()) so that tests can pin the clock.

-- name: HandlerBreakerRecord :many
-- Adds the breaker failures of one outcome batch to their handlers' counters: per
-- handler the failures that came after its last success, reset first when a success
-- came (reset). A closed breaker whose counter reaches its threshold opens, with its
-- first probe due breaker_probe_ms later. A tally with no failure only writes a handler
-- that has failures to forget (a healthy handler is never written). The rows are locked
-- in name order (no deadlock between two processes' batches) and the counters computed
-- from the locked versions, so concurrent batches add up. Answers the handlers written,
-- with opened true for a breaker this statement opened.
-- Index use: handlers_pkey per name.
WITH t AS (
    SELECT * FROM ROWS FROM (unnest(sqlc.arg(names)::text[]), unnest(sqlc.arg(failures)::int[]),
                             unnest(sqlc.arg(resets)::bool[])) AS t(name, failures, reset)
),
locked AS (
    SELECT h.name, h.breaker_state, h.breaker_threshold, h.breaker_probe_ms,
           (CASE WHEN t.reset THEN 0 ELSE h.consecutive_failures END) + t.failures AS failures
    FROM handlers h JOIN t ON t.name = h.name
    WHERE h.name = ANY (sqlc.arg(names)::text[])
      AND (t.failures > 0 OR h.consecutive_failures > 0)
    ORDER BY h.name
    FOR UPDATE OF h
),
counted AS (
    SELECT l.name, l.failures,
           l.breaker_state = 'closed' AND l.breaker_threshold > 0 AND l.failures >= l.breaker_threshold AS opens,
           coalesce(sqlc.narg(now)::timestamptz, now()) AS at, l.breaker_probe_ms
    FROM locked l
)
UPDATE handlers h
SET consecutive_failures = c.failures,
    breaker_state = CASE WHEN c.opens THEN 'open' ELSE h.breaker_state END,
    breaker_opened_at = CASE WHEN c.opens THEN c.at ELSE h.breaker_opened_at END,
    breaker_next_probe_at = CASE WHEN c.opens THEN c.at + c.breaker_probe_ms * interval '1 millisecond'
                                 ELSE h.breaker_next_probe_at END,
    breaker_probes = CASE WHEN c.opens THEN 0 ELSE h.breaker_probes END,
    breaker_opens = h.breaker_opens + CASE WHEN c.opens THEN 1 ELSE 0 END
FROM counted c
WHERE h.name = c.name AND h.name = ANY (sqlc.arg(names)::text[])
RETURNING h.name, h.breaker_state, h.consecutive_failures, c.opens AS opened;

-- name: HandlerBreakerProbe :one
-- Asks for the right to send the one probe of an open breaker. Across every process one
-- caller wins it: the UPDATE moves an open breaker whose probe is due (or a half-open
-- one whose probe was given up for lost: its process died) to half_open, with a deadline
-- of the handler's timeout plus 30 s after which another probe may go. A breaker open
-- for longer than breaker_pause_after_ms is paused instead (no probe until an operator
-- resumes it). Answers the breaker as it is now and whether this caller won the probe.
-- Index use: handlers_pkey.
WITH now AS (
    SELECT coalesce(sqlc.narg(now)::timestamptz, now()) AS at
),
won AS (
    -- pausing: (h.breaker_pause_after_ms > 0 AND h.breaker_opened_at + h.breaker_pause_after_ms * interval '1 millisecond' <= n.at)
    UPDATE handlers h
    SET breaker_state = CASE WHEN (h.breaker_pause_after_ms > 0 AND h.breaker_opened_at + h.breaker_pause_after_ms * interval '1 millisecond' <= n.at) THEN h.breaker_state ELSE 'half_open' END,
        breaker_next_probe_at = CASE WHEN (h.breaker_pause_after_ms > 0 AND h.breaker_opened_at + h.breaker_pause_after_ms * interval '1 millisecond' <= n.at) THEN h.breaker_next_probe_at
                                     ELSE n.at + (h.timeout_ms + 30000) * interval '1 millisecond' END,
        paused_at = CASE WHEN (h.breaker_pause_after_ms > 0 AND h.breaker_opened_at + h.breaker_pause_after_ms * interval '1 millisecond' <= n.at) THEN n.at END,
        paused_reason = CASE WHEN (h.breaker_pause_after_ms > 0 AND h.breaker_opened_at + h.breaker_pause_after_ms * interval '1 millisecond' <= n.at) THEN format('circuit breaker open since %s, longer than its pause_after (%s)',
            to_char(h.breaker_opened_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
            h.breaker_pause_after_ms * interval '1 millisecond') END
    FROM now n
    WHERE h.name = sqlc.arg(name)
      AND h.breaker_state <> 'closed'
      AND h.paused_at IS NULL
      AND h.breaker_next_probe_at <= n.at
    RETURNING h.name, h.breaker_state, h.breaker_next_probe_at, h.paused_at
)
-- (h is the row before this statement, w the row it wrote; the caller takes w when present)
SELECT h.breaker_state, h.breaker_next_probe_at, h.paused_at,
       w.breaker_state AS won_state, w.breaker_next_probe_at AS won_next_probe_at, w.paused_at AS won_paused_at
FROM handlers h LEFT JOIN won w ON w.name = h.name
WHERE h.name = sqlc.arg(name);

-- name: HandlerBreakerProbeResult :one
-- Records how the probe of a half-open breaker went: a success closes it (counter and
-- probes reset); a failure opens it again with the next probe breaker_probe_ms ×
-- 2^probes later, capped at breaker_probe_max_ms. Answers nothing when the breaker is no
-- longer half-open (an operator resumed it meanwhile).
-- Index use: handlers_pkey.
WITH now AS (
    SELECT coalesce(sqlc.narg(now)::timestamptz, now()) AS at
)
UPDATE handlers h
SET breaker_state = CASE WHEN sqlc.arg(success)::bool THEN 'closed' ELSE 'open' END,
    consecutive_failures = CASE WHEN sqlc.arg(success)::bool THEN 0 ELSE h.consecutive_failures + 1 END,
    breaker_probes = CASE WHEN sqlc.arg(success)::bool THEN 0 ELSE h.breaker_probes + 1 END,
    breaker_opened_at = CASE WHEN sqlc.arg(success)::bool THEN NULL ELSE h.breaker_opened_at END,
    breaker_next_probe_at = CASE WHEN sqlc.arg(success)::bool THEN NULL
        ELSE n.at + least(h.breaker_probe_max_ms::float8,
                          h.breaker_probe_ms::float8 * power(2, least(h.breaker_probes + 1, 40))) * interval '1 millisecond'
        END
FROM now n
WHERE h.name = sqlc.arg(name) AND h.breaker_state = 'half_open'
RETURNING h.breaker_state, h.breaker_next_probe_at;

-- name: HandlerBreakerResume :one
-- Closes a handler's breaker and lifts its pause (an operator's decision; the caller then
-- wakes its parked steps with JobWakeParked). Index use: handlers_pkey.
UPDATE handlers h
SET breaker_state = 'closed', consecutive_failures = 0, breaker_probes = 0,
    breaker_opened_at = NULL, breaker_next_probe_at = NULL, paused_at = NULL, paused_reason = NULL,
    updated_at = now()
WHERE h.name = sqlc.arg(name)
RETURNING h.*;

-- name: LeaseParkMany :many
-- Gives claimed steps of a handler whose breaker is open back without calling it: runnable
-- again at their own eligible_at (the breaker's next probe, or later), the attempt the
-- claim counted undone, the gate slot returned, and marked lease_owner
-- 'breaker:<handler>' so that JobWakeParked finds them when the breaker closes.
-- LeaseReleaseMany with a time per row and no NOTIFY (nothing is due). Fenced per row
-- by (id, token) as the outcome is, with no `status = 'executing'` test (it let the
-- planner read all of jobs_lease, every step in flight; see LeaseReleaseMany). A row
-- missing from the result was no longer held.
-- Index use: jobs_pkey per id (`id = ANY (ids)`, PK lookups under any plan); 50 parks
-- read 50 rows of jobs whatever is in flight (TestLeaseGiveBackReadsOnlyItsRows).
WITH l AS (
    SELECT * FROM ROWS FROM (unnest(sqlc.arg(ids)::bigint[]), unnest(sqlc.arg(tokens)::uuid[]),
                             unnest(sqlc.arg(eligible_ats)::timestamptz[])) AS l(id, token, eligible_at)
),
before AS (
    SELECT j.id, j.concurrency_key, j.gate_shard
    FROM jobs j JOIN l ON j.id = l.id AND j.lease_token = l.token
    WHERE j.id = ANY (sqlc.arg(ids)::bigint[])
),
updated AS (
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
    WHERE j.id = l.id
      AND j.lease_token = l.token
      AND j.id = ANY (sqlc.arg(ids)::bigint[])
    RETURNING j.id, j.queue
),
-- The gate slot an ending step held goes back to its shard (capped: a gate whose limit
-- was lowered meanwhile refills only up to its new cap).
credited AS (
    UPDATE gate_slots s
    SET available = least(s.cap, s.available + d.n)
    FROM (SELECT b.concurrency_key AS key, b.gate_shard AS shard, count(*) AS n
          FROM updated u JOIN before b ON b.id = u.id
          WHERE b.gate_shard IS NOT NULL
          GROUP BY 1, 2 ORDER BY 1, 2) d
    WHERE s.key = d.key AND s.shard = d.shard
)
SELECT u.id FROM updated u;

-- name: JobWakeParked :one
-- Makes the steps an open breaker parked for handler due now (the breaker closed), and
-- wakes the dispatchers of their queues. Answers how many it woke.
-- Index use: jobs_breaker_parked (it holds the parked steps only).
WITH woken AS (
    UPDATE jobs j
    SET eligible_at = now(), lease_owner = NULL, updated_at = now()
    WHERE j.status = 'runnable' AND j.lease_owner = 'breaker:' || sqlc.arg(handler)::text
    RETURNING j.queue
),
notified AS (
    SELECT count(pg_notify('gendurable_jobs', q.queue)) AS n
    FROM (SELECT DISTINCT w.queue FROM woken w) q
)
SELECT count(*)::bigint AS woken FROM woken, notified;
