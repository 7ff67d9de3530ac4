-- name: LeaseExtendMany
-- Extends the leases of a process's in-flight steps in one statement per heartbeat tick.
-- Fenced per row by its token (only an executing row holds one). A row that another
-- transaction has locked (an application's transaction, a long statement) is skipped for
-- this tick rather than waited for: one locked row must not stall the heartbeat of every
-- step of the process until all their leases expire (found by the chaos run). Answers
-- every lease still held: extended, or (skipped) with its current expiry. A lease missing
-- from the answer is lost.
-- Index use: jobs_pkey per id (unnest × PK lookups); a skipped row one more.
WITH l AS (
    SELECT * FROM unnest($1::bigint[], $2::uuid[]) AS l(id, token)
),
locked AS (
    SELECT j.id
    FROM jobs j JOIN l ON j.id = l.id AND j.lease_token = l.token
    WHERE j.id = ANY ($1::bigint[])
    FOR UPDATE OF j SKIP LOCKED
),
extended AS (
    UPDATE jobs j
    SET lease_expires_at = now() + $3 * interval '1 millisecond'
    FROM locked k
    WHERE j.id = k.id AND j.id = ANY ($1::bigint[])
    RETURNING j.id, j.lease_expires_at
)
SELECT h.id, h.expires_at
FROM (SELECT l.id,
             -- coalesce evaluates the probe only for a row skipped as locked
             coalesce(e.lease_expires_at,
                      (SELECT s.lease_expires_at FROM jobs s WHERE s.id = l.id AND s.lease_token = l.token)) AS expires_at
      FROM l LEFT JOIN extended e ON e.id = l.id) h
WHERE h.expires_at IS NOT NULL;

-- name: LeaseReleaseMany
-- Gives claimed steps back before their webhook was called (the claim's follow-up reads
-- failed): runnable again at once, the attempt the claim counted undone, the gate slot
-- returned. Fenced per row by status and token like every lease write; a row missing
-- from the result was no longer held.
-- Index use: jobs_pkey per id (unnest × PK lookups).
WITH before AS (
    SELECT j.id, j.concurrency_key, j.gate_shard
    FROM jobs j JOIN unnest($1::bigint[], $2::uuid[]) AS l(id, token)
      ON j.id = l.id AND j.status = 'executing' AND j.lease_token = l.token
),
updated AS (
    UPDATE jobs j
    SET status = 'runnable',
        attempt = greatest(j.attempt - 1, 0),
        eligible_at = now(),
        lease_token = NULL,
        lease_expires_at = NULL,
        lease_owner = NULL,
        gate_shard = NULL,
        late_signals = NULL,
        updated_at = now()
    FROM unnest($1::bigint[], $2::uuid[]) AS l(id, token)
    WHERE j.id = l.id
      AND j.status = 'executing'
      AND j.lease_token = l.token
    RETURNING j.id, j.queue
),
-- @GateCredit
notified AS (
    SELECT count(pg_notify('gendurable_jobs', q.queue)) AS n
    FROM (SELECT DISTINCT queue FROM updated) q
)
SELECT u.id FROM updated u, notified;
