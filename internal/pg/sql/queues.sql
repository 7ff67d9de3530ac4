-- name: QueueUpsert :one
-- Creates or changes a queue's settings; NULL parameters keep the current value
-- (clear_retention = true clears the retention override, retention_ms sets it in ms). Every dispatcher is told
-- at once (NOTIFY '!settings', a payload no queue name can take) rather than at its next
-- periodic reload: a resumed queue runs now, not up to a reload interval later.
WITH q AS (
    INSERT INTO queues AS q (name, paused, max_in_flight, batch, retention, step_bodies, fairness)
    VALUES (sqlc.arg(name)::text, coalesce(sqlc.narg(paused)::bool, false), coalesce(sqlc.narg(max_in_flight)::int, 100), coalesce(sqlc.narg(batch)::int, 50), sqlc.narg(retention_ms)::bigint * interval '1 millisecond',
            coalesce(sqlc.narg(step_bodies)::text, 'failures'), coalesce(sqlc.narg(fairness)::text, 'none'))
    ON CONFLICT (name) DO UPDATE
    SET paused = coalesce(sqlc.narg(paused), q.paused),
        max_in_flight = coalesce(sqlc.narg(max_in_flight), q.max_in_flight),
        batch = coalesce(sqlc.narg(batch), q.batch),
        step_bodies = coalesce(sqlc.narg(step_bodies), q.step_bodies),
        fairness = coalesce(sqlc.narg(fairness), q.fairness),
        retention = CASE WHEN sqlc.arg(clear_retention)::bool THEN NULL ELSE coalesce(sqlc.narg(retention_ms) * interval '1 millisecond', q.retention) END,
        updated_at = excluded.updated_at
    RETURNING q.*
),
notified AS (
    SELECT count(pg_notify('gendurable_jobs', '!settings')) FROM q
)
SELECT q.name, q.paused, q.max_in_flight, q.batch, q.retention, q.created_at, q.updated_at, q.step_bodies,
       q.fairness, q.fair_cursor, q.fair_credit
FROM q, notified;

-- name: JobFairnessKeyBackfill :execrows
-- Gives the live jobs of queue without a fairness key the key '' once the queue is fair
-- (pg.QueueUpsert, after the setting committed: an insert that began before it read
-- the queue as unfair): every live job of a fair queue has a key, as the fair claim
-- reads jobs_fair_pick only. Reads the queue's live jobs once (jobs_pick for the
-- runnable ones).
UPDATE jobs j SET fairness_key = ''
WHERE j.queue = sqlc.arg(queue)::text AND j.fairness_key IS NULL
  AND j.status IN ('runnable', 'executing', 'awaiting');

-- name: QueueList :many
-- Every queue's settings (the feeders reload these every second).
SELECT q.* FROM queues q ORDER BY q.name;

-- name: QueueCounts :many
-- Jobs per status of queue queue (NULL: all queues), and the age of the oldest runnable job.
-- Live statuses are counted from their partial indexes; terminal ones are bounded by the
-- GC retention. Cost: proportional to the jobs of the queue.
SELECT j.queue, j.status, count(*) AS n,
       CASE WHEN j.status = 'runnable' THEN min(j.eligible_at) END AS oldest_runnable
FROM jobs j
WHERE sqlc.narg(queue)::text IS NULL OR j.queue = sqlc.narg(queue)
GROUP BY j.queue, j.status;

-- name: QueueEnsureMany :exec
-- Creates the queues of names that do not exist yet, with default settings (the children of
-- a spawn may name a queue nothing has created; feeders start for queues rows only).
-- Index use: queues_pkey per name.
INSERT INTO queues (name)
SELECT DISTINCT n FROM unnest(sqlc.arg(names)::text[]) AS n
ON CONFLICT (name) DO NOTHING;

-- name: FairnessKeyUpsert :one
-- Sets a fairness key's settings in a queue, all of them (a PUT): weight (NULL: 1) and
-- cap (NULL: none). (The clock is read in VALUES: Citus refuses a function that is not
-- immutable in DO UPDATE SET.)
INSERT INTO fairness_keys AS k (queue, key, weight, max_in_flight, updated_at)
VALUES (sqlc.arg(queue)::text, sqlc.arg(key)::text, coalesce(sqlc.narg(weight)::int, 1), sqlc.narg(max_in_flight)::int, now())
ON CONFLICT (queue, key) DO UPDATE
SET weight = excluded.weight, max_in_flight = excluded.max_in_flight, updated_at = excluded.updated_at
RETURNING k.*;

-- name: FairnessKeyDelete :one
DELETE FROM fairness_keys WHERE queue = sqlc.arg(queue)::text AND key = sqlc.arg(key)::text RETURNING key;

-- name: FairnessKeyList :many
-- A page of a queue's fairness keys in key order: after `after` (NULL: from the first),
-- those starting with prefix ('' for all). The keys with live work are found as the fair
-- claim finds them, one descent of jobs_fair_pick (runnable) or jobs_fair_executing per
-- key, and the keys with settings from fairness_keys; each comes with its runnable and
-- executing counts (its index entries). Cost: O(page + the page's keys' live jobs).
WITH RECURSIVE live(key) AS (
    (SELECT j.fairness_key FROM jobs j
     WHERE j.queue = sqlc.arg(queue)::text AND j.status = 'runnable' AND j.fairness_key IS NOT NULL
       AND sqlc.narg(after)::text IS NULL AND j.fairness_key >= sqlc.arg(prefix)::text
     ORDER BY j.fairness_key LIMIT 1)
    UNION ALL
    (SELECT j.fairness_key FROM jobs j
     WHERE j.queue = sqlc.arg(queue)::text AND j.status = 'runnable' AND j.fairness_key IS NOT NULL
       AND j.fairness_key > sqlc.narg(after)::text
     ORDER BY j.fairness_key LIMIT 1)
    UNION ALL
    SELECT (SELECT j.fairness_key FROM jobs j
            WHERE j.queue = sqlc.arg(queue)::text AND j.status = 'runnable' AND j.fairness_key IS NOT NULL
              AND j.fairness_key > w.key
            ORDER BY j.fairness_key LIMIT 1)
    FROM live w
    WHERE w.key IS NOT NULL AND starts_with(w.key, sqlc.arg(prefix)::text)
),
executing(key) AS (
    (SELECT j.fairness_key FROM jobs j
     WHERE j.queue = sqlc.arg(queue)::text AND j.status = 'executing' AND j.fairness_key IS NOT NULL
       AND sqlc.narg(after)::text IS NULL AND j.fairness_key >= sqlc.arg(prefix)::text
     ORDER BY j.fairness_key LIMIT 1)
    UNION ALL
    (SELECT j.fairness_key FROM jobs j
     WHERE j.queue = sqlc.arg(queue)::text AND j.status = 'executing' AND j.fairness_key IS NOT NULL
       AND j.fairness_key > sqlc.narg(after)::text
     ORDER BY j.fairness_key LIMIT 1)
    UNION ALL
    SELECT (SELECT j.fairness_key FROM jobs j
            WHERE j.queue = sqlc.arg(queue)::text AND j.status = 'executing' AND j.fairness_key IS NOT NULL
              AND j.fairness_key > w.key
            ORDER BY j.fairness_key LIMIT 1)
    FROM executing w
    WHERE w.key IS NOT NULL AND starts_with(w.key, sqlc.arg(prefix)::text)
),
page AS (
    SELECT DISTINCT k.key FROM (
        (SELECT l.key FROM live l WHERE l.key IS NOT NULL LIMIT sqlc.arg(page_size)::int + 1)
        UNION ALL
        (SELECT e.key FROM executing e WHERE e.key IS NOT NULL LIMIT sqlc.arg(page_size)::int + 1)
        UNION ALL
        (SELECT f.key FROM fairness_keys f
         WHERE f.queue = sqlc.arg(queue)::text
           AND CASE WHEN sqlc.narg(after)::text IS NULL THEN f.key >= sqlc.arg(prefix)::text ELSE f.key > sqlc.narg(after)::text END
         ORDER BY f.key LIMIT sqlc.arg(page_size)::int + 1)
    ) k
    WHERE starts_with(k.key, sqlc.arg(prefix)::text)
    ORDER BY k.key
    LIMIT sqlc.arg(page_size)::int + 1
)
SELECT p.key::text AS key, coalesce(f.weight, 1)::int AS weight, f.max_in_flight, f.updated_at,
       (f.key IS NOT NULL)::bool AS declared,
       (SELECT count(*) FROM jobs j WHERE j.queue = sqlc.arg(queue)::text AND j.status = 'runnable' AND j.fairness_key = p.key)::bigint AS runnable,
       (SELECT count(*) FROM jobs j WHERE j.queue = sqlc.arg(queue)::text AND j.status = 'executing' AND j.fairness_key = p.key)::bigint AS in_flight
FROM page p
LEFT JOIN fairness_keys f ON f.queue = sqlc.arg(queue)::text AND f.key = p.key
ORDER BY p.key;

-- name: FairnessKeyTop :many
-- A fair queue's keys with the most runnable jobs, with their executing counts: it counts
-- every runnable keyed job of the queue (an index-only scan of jobs_fair_pick), for the
-- dashboard's "top keys". prefix '': every key.
SELECT r.key::text AS key, coalesce(f.weight, 1)::int AS weight, f.max_in_flight, f.updated_at,
       (f.key IS NOT NULL)::bool AS declared, r.runnable::bigint AS runnable,
       (SELECT count(*) FROM jobs j WHERE j.queue = sqlc.arg(queue)::text AND j.status = 'executing' AND j.fairness_key = r.key)::bigint AS in_flight
FROM (SELECT j.fairness_key AS key, count(*) AS runnable FROM jobs j
      WHERE j.queue = sqlc.arg(queue)::text AND j.status = 'runnable' AND j.fairness_key IS NOT NULL
        AND starts_with(j.fairness_key, sqlc.arg(prefix)::text)
      GROUP BY j.fairness_key
      ORDER BY count(*) DESC, j.fairness_key
      LIMIT sqlc.arg(page_size)::int) r
LEFT JOIN fairness_keys f ON f.queue = sqlc.arg(queue)::text AND f.key = r.key
ORDER BY r.runnable DESC, r.key;
