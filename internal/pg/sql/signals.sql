-- name: SignalDeliver :one
-- Delivers a signal in one statement. The target is job job_id, or the live job holding key
-- job_key. Its row is locked whatever its status (FOR UPDATE, then a CASE on status, never a
-- status filter in the lock): a status-filtered update would skip a job that is still
-- executing and about to park, which is how wakeups get lost. Under that lock inbox_seq
-- is bumped and stamps the signal, and an executing job records the name in
-- late_signals, so a park racing this delivery sees both (see outcome.sql). An awaiting job waiting for this name (or any name) and for no
-- children becomes runnable. A finished job gets nothing (the caller answers 409).
-- Index use: jobs_pkey (or jobs_live_key), signals_inbox. No scan grows with the table.
WITH target AS (
    SELECT j.id, j.status
    FROM jobs j
    WHERE j.id = coalesce(sqlc.narg(job_id)::bigint,
                          (SELECT k.id FROM jobs k
                           WHERE k.key = sqlc.narg(job_key)::text AND k.status IN ('runnable', 'executing', 'awaiting')))
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
                           THEN now() ELSE j.eligible_at END,
        -- A step in flight may be about to await this name: its outcome reads the names
        -- that arrived during the step from here (see outcome.sql, migration 0005).
        late_signals = CASE WHEN j.status <> 'executing' OR sqlc.arg(name) = ANY (j.late_signals)
                                 OR cardinality(j.late_signals) >= 64 THEN j.late_signals
                            ELSE array_append(j.late_signals, sqlc.arg(name)::text) END,
        -- A job without a trace context takes the signal's (docs/observability.md).
        trace_context = coalesce(j.trace_context, sqlc.narg(trace_context)::text),
        updated_at = now()
    FROM target t
    WHERE j.id = t.id AND j.status IN ('runnable', 'executing', 'awaiting')
    RETURNING j.id, j.inbox_seq, j.queue, (t.status = 'awaiting' AND j.status = 'runnable') AS woke
),
inserted AS (
    -- The sender's trace context: the attempt the signal is shown to links to it.
    INSERT INTO signals (job_id, seq, name, payload, trace_context)
    SELECT d.id, d.inbox_seq, sqlc.arg(name), sqlc.narg(payload)::jsonb, sqlc.narg(trace_context)::text FROM delivered d
    RETURNING id
),
notified AS (
    SELECT count(pg_notify('gendurable_jobs', d.queue)) AS n FROM delivered d WHERE d.woke
)
SELECT t.id AS job_id, t.status AS job_status, i.id AS signal_id, coalesce(d.woke, false) AS woke
FROM target t
LEFT JOIN delivered d ON true
LEFT JOIN inserted i ON true
CROSS JOIN notified;

-- name: SignalLoadInboxes :many
-- The signals each claimed step is shown: for each (job, after, upto) the inbox entries
-- with after < seq <= upto, oldest first, each with its sender's trace context (the
-- attempt's span links to it). One statement per pick batch; a range scan of
-- signals_inbox per job, bounded by the per-step cap.
SELECT s.job_id, s.id, s.seq, s.name, s.payload, s.created_at, s.trace_context
FROM ROWS FROM (unnest(sqlc.arg(job_ids)::bigint[]), unnest(sqlc.arg(after_seqs)::bigint[]), unnest(sqlc.arg(upto_seqs)::bigint[])) AS w(job_id, after_seq, upto_seq)
JOIN signals s ON s.job_id = w.job_id AND s.seq > w.after_seq AND s.seq <= w.upto_seq
ORDER BY s.job_id, s.seq;

-- name: SignalList :many
-- A job's inbox, oldest first, with whether each signal was consumed (signals_inbox).
SELECT s.id, s.seq, s.name, s.payload, s.created_at, s.seq <= j.consumed_seq AS consumed
FROM signals s JOIN jobs j ON j.id = s.job_id
WHERE s.job_id = sqlc.arg(job_id)::bigint
ORDER BY s.seq
LIMIT sqlc.arg(max_rows)::int;
