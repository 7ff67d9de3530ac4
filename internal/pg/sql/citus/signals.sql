-- name: SignalDeliver :one
-- The first half of a signal's delivery on Citus (SignalDeliver in sql/signals.sql, whose
-- rules it keeps): the target's row, at its placement, locked whatever its status, its
-- inbox_seq bumped, an awaiting job woken. SignalInsert then writes the inbox entry with
-- the new inbox_seq in the same transaction (Citus routes no INSERT inside a CTE). The
-- target is job job_id, or the live job holding job_key (both at `placement`).
WITH target AS (
    SELECT j.id, j.status, now() AS now  -- the clock, read here: see JobReapExpiredLeases
    FROM jobs j
    WHERE j.placement = sqlc.arg(placement)::int
      AND j.id = coalesce(sqlc.narg(job_id)::bigint,
                          (SELECT k.id FROM jobs k
                           WHERE k.placement = sqlc.arg(placement)::int
                             AND k.key = sqlc.narg(job_key)::text AND k.status IN ('runnable', 'executing', 'awaiting')))
    FOR UPDATE
),
delivered AS (
    UPDATE jobs j
    SET inbox_seq = j.inbox_seq + 1,
        status = CASE WHEN j.status = 'awaiting' AND j.pending_children = 0
                           AND (j.awaiting IS NULL OR sqlc.arg(name)::text = ANY (j.awaiting))
                      THEN 'runnable' ELSE j.status END,
        wake = CASE WHEN j.status = 'awaiting' AND j.pending_children = 0
                         AND (j.awaiting IS NULL OR sqlc.arg(name) = ANY (j.awaiting))
                    THEN 'signal' ELSE j.wake END,
        eligible_at = CASE WHEN j.status = 'awaiting' AND j.pending_children = 0
                                AND (j.awaiting IS NULL OR sqlc.arg(name) = ANY (j.awaiting))
                           THEN t.now ELSE j.eligible_at END,
        late_signals = CASE WHEN j.status <> 'executing' OR sqlc.arg(name) = ANY (j.late_signals)
                                 OR cardinality(j.late_signals) >= 64 THEN j.late_signals
                            ELSE array_append(j.late_signals, sqlc.arg(name)::text) END,
        -- A job without a trace context takes the signal's (docs/observability.md).
        trace_context = coalesce(j.trace_context, sqlc.narg(trace_context)::text),
        updated_at = t.now
    FROM target t
    WHERE j.placement = sqlc.arg(placement)::int AND j.id = t.id AND j.status IN ('runnable', 'executing', 'awaiting')
    RETURNING j.id, j.inbox_seq, j.queue, (t.status = 'awaiting' AND j.status = 'runnable') AS woke
)
SELECT t.id AS job_id, t.status AS job_status, d.inbox_seq, d.queue, coalesce(d.woke, false) AS woke
FROM target t LEFT JOIN delivered d ON true;

-- name: SignalInsert :one
-- The inbox entry of a signal SignalDeliver delivered (its seq is the job's new
-- inbox_seq): INSERT ... VALUES at the job's placement, a router statement (Citus draws
-- the identity on the coordinator).
INSERT INTO signals (job_id, seq, name, payload, placement, trace_context)
VALUES (sqlc.arg(job_id)::bigint, sqlc.arg(seq)::bigint, sqlc.arg(name)::text, sqlc.narg(payload)::jsonb, sqlc.arg(placement)::int,
        sqlc.narg(trace_context)::text)
RETURNING id;

-- name: SignalLoadInboxes :many
-- SignalLoadInboxes (sql/signals.sql) for the claimed steps of one shard.
SELECT s.job_id, s.id, s.seq, s.name, s.payload, s.created_at, s.trace_context
FROM ROWS FROM (unnest(sqlc.arg(job_ids)::bigint[]), unnest(sqlc.arg(after_seqs)::bigint[]), unnest(sqlc.arg(upto_seqs)::bigint[])) AS w(job_id, after_seq, upto_seq)
JOIN signals s ON s.job_id = w.job_id AND s.seq > w.after_seq AND s.seq <= w.upto_seq
WHERE s.placement = ANY (sqlc.arg(placements)::int[])
ORDER BY s.job_id, s.seq;

-- name: SignalList :many
-- SignalList (sql/signals.sql) at the job's placement.
SELECT s.id, s.seq, s.name, s.payload, s.created_at, s.seq <= j.consumed_seq AS consumed
FROM signals s JOIN jobs j ON j.id = s.job_id AND j.placement = s.placement
WHERE s.placement = sqlc.arg(placement)::int AND s.job_id = sqlc.arg(job_id)::bigint
ORDER BY s.seq
LIMIT sqlc.arg(max_rows)::int;

-- name: WorkNotify :exec
-- Wakes the dispatchers of queues: NOTIFY on the coordinator, where they LISTEN (a
-- NOTIFY made on a worker never reaches it). A statement with no distributed table runs
-- on the coordinator.
SELECT pg_notify('gendurable_jobs', q) FROM unnest(sqlc.arg(payloads)::text[]) AS q;
