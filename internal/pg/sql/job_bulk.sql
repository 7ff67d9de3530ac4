-- name: JobCancelMany :one
-- Cancels, in one statement, the first max_rows live jobs (by id) that match the filter,
-- each with its live descendants, as JobCancel does for one: runnable and awaiting jobs
-- at once, executing ones flagged (cancel_requested) to end as cancelled at their
-- outcome; parents outside the cancelled trees are joined (`joined`, a copy
-- TestStatementCopiesAgree holds equal to the outcome's). An executing job already
-- flagged is not a candidate (nor counted again), so repeated calls come to an end, and
-- two concurrent calls lock in id order and count each job once: the second re-checks
-- the status on the row the first left. `more` says that matching jobs remain.
-- Index use: jobs_pkey in id order, filtered: it reads the rows up to the last match it
-- takes (TestBulkBatchReadsAboutTheLimit), so a filter that matches only jobs far behind
-- others reads those others too, as JobList does; jobs_parent per level of the trees.
WITH RECURSIVE candidates AS (
    SELECT j.id FROM jobs j
    WHERE j.status IN ('runnable', 'executing', 'awaiting')
      AND NOT (j.status = 'executing' AND j.cancel_requested)
      AND (sqlc.narg(statuses)::text[] IS NULL OR j.status = ANY (sqlc.narg(statuses)::text[]))
      AND (sqlc.narg(queue)::text IS NULL OR j.queue = sqlc.narg(queue)::text)
      AND (sqlc.narg(handler)::text IS NULL OR j.handler = sqlc.narg(handler)::text)
      AND (sqlc.narg(created_after)::timestamptz IS NULL OR j.created_at >= sqlc.narg(created_after)::timestamptz)
      AND (sqlc.narg(created_before)::timestamptz IS NULL OR j.created_at < sqlc.narg(created_before)::timestamptz)
      AND (sqlc.narg(key_prefix)::text IS NULL OR starts_with(j.key, sqlc.narg(key_prefix)::text))
    ORDER BY j.id
    LIMIT sqlc.arg(max_rows)::int + 1
),
tree AS (
    SELECT r.id FROM (SELECT c.id FROM candidates c ORDER BY c.id LIMIT sqlc.arg(max_rows)::int) r
    UNION
    SELECT c.id FROM jobs c JOIN tree t ON c.parent_id = t.id
    WHERE c.status IN ('runnable', 'executing', 'awaiting')
),
locked AS (
    SELECT j.id FROM jobs j JOIN tree t ON t.id = j.id ORDER BY j.id FOR UPDATE OF j
),
updated AS (
    UPDATE jobs j
    SET status = CASE WHEN j.status IN ('runnable', 'awaiting') THEN 'cancelled' ELSE j.status END,
        cancel_requested = true,
        cancelled_while = CASE WHEN j.status = 'runnable' THEN 'runnable'
                               WHEN j.status = 'awaiting' AND j.pending_children > 0 THEN 'awaiting_children'
                               WHEN j.status = 'awaiting' THEN 'awaiting_signal'
                               ELSE j.cancelled_while END,
        finished_at = CASE WHEN j.status IN ('runnable', 'awaiting') THEN now() ELSE j.finished_at END,
        error = CASE WHEN j.status IN ('runnable', 'awaiting')
                     THEN '{"message": "cancelled"}'::jsonb ELSE j.error END,
        updated_at = now()
    FROM locked l
    WHERE j.id = l.id AND j.status IN ('runnable', 'executing', 'awaiting')
      AND NOT (j.status = 'executing' AND j.cancel_requested)
    RETURNING j.id, j.status, j.parent_id
),
-- The parent join of a statement whose `updated` CTE ended children: each parent's
-- pending_children drops by its finished children (grouped, so two children of one
-- parent in a batch count twice), and a parent waiting for them is woken at zero.
-- A row `updated` already changed is left alone: Postgres applies only one of two
-- updates of a row in one statement. Parents are locked in id order.
joined AS (
    UPDATE jobs p
    SET pending_children = p.pending_children - d.n,
        status = CASE WHEN p.status = 'awaiting' AND p.pending_children <= d.n THEN 'runnable'
                      ELSE p.status END,
        wake = CASE WHEN p.status = 'awaiting' AND p.pending_children <= d.n THEN 'children'
                    ELSE p.wake END,
        eligible_at = CASE WHEN p.status = 'awaiting' AND p.pending_children <= d.n THEN now()
                           ELSE p.eligible_at END,
        updated_at = now()
    FROM (SELECT parent_id, count(*) AS n FROM updated
          WHERE parent_id IS NOT NULL AND status IN ('done', 'failed', 'cancelled')
          GROUP BY parent_id ORDER BY parent_id) d
    WHERE p.id = d.parent_id AND p.pending_children > 0
      AND p.id NOT IN (SELECT u.id FROM updated u)
    RETURNING p.queue, p.status
),
notified AS (
    SELECT count(pg_notify('gendurable_jobs', q.queue)) AS n
    FROM (SELECT DISTINCT queue FROM joined WHERE status = 'runnable') q
)
SELECT (SELECT count(*) FROM candidates) > sqlc.arg(max_rows)::int AS more,
       (SELECT count(*) FROM updated) AS changed,
       n.n
FROM notified n;

-- name: JobRetryMany :one
-- Retries, in one statement, the first max_rows failed or cancelled jobs (by id) that
-- match the filter, each as JobRetry does for one (it resumes what the job was doing:
-- see JobRetry). A job whose key a live job holds is not a candidate, and of several
-- candidates sharing a key only the newest is retried (the others' key is then live),
-- so a batch never trips jobs_live_key on its own. A retried child of a parent still
-- waiting for its children counts as pending again; a parent retried in the same batch
-- counts its retried children among its live ones. Rows are locked in id order; a job
-- another call retried meanwhile is re-checked and left out. `more` says that matching
-- jobs remain.
-- Index use: jobs_pkey in id order, filtered (as JobCancelMany); jobs_live_key per keyed
-- row passed (NOT EXISTS without an OR, so that it stays a per-row probe rather than a
-- hash of every job); jobs_parent for the live children of a resumed join.
WITH candidates AS (
    SELECT j.id, j.key FROM jobs j
    WHERE j.status IN ('failed', 'cancelled')
      AND (sqlc.narg(statuses)::text[] IS NULL OR j.status = ANY (sqlc.narg(statuses)::text[]))
      AND (sqlc.narg(queue)::text IS NULL OR j.queue = sqlc.narg(queue)::text)
      AND (sqlc.narg(handler)::text IS NULL OR j.handler = sqlc.narg(handler)::text)
      AND (sqlc.narg(created_after)::timestamptz IS NULL OR j.created_at >= sqlc.narg(created_after)::timestamptz)
      AND (sqlc.narg(created_before)::timestamptz IS NULL OR j.created_at < sqlc.narg(created_before)::timestamptz)
      AND (sqlc.narg(key_prefix)::text IS NULL OR starts_with(j.key, sqlc.narg(key_prefix)::text))
      AND NOT EXISTS (SELECT 1 FROM jobs l WHERE l.key = j.key AND l.status IN ('runnable', 'executing', 'awaiting'))
    ORDER BY j.id
    LIMIT sqlc.arg(max_rows)::int + 1
),
picked AS (
    SELECT r.id FROM (
        SELECT c.id, c.key, row_number() OVER (PARTITION BY c.key ORDER BY c.id DESC) AS nth
        FROM (SELECT c.id, c.key FROM candidates c ORDER BY c.id LIMIT sqlc.arg(max_rows)::int) c
    ) r
    WHERE r.key IS NULL OR r.nth = 1
),
target AS (
    SELECT j.id, j.cancelled_while,
           -- An unconsumed signal the await names (one that arrived as its step was
           -- cancelled at its outcome): the resumed wait is over at once.
           j.status = 'cancelled' AND j.cancelled_while = 'awaiting_signal' AND EXISTS (
               SELECT 1 FROM signals s
               WHERE s.job_id = j.id AND s.seq > j.consumed_seq
                 AND (j.awaiting IS NULL OR s.name = ANY (j.awaiting))) AS signalled,
           CASE WHEN j.status = 'cancelled' AND j.cancelled_while = 'awaiting_children' THEN
               (SELECT count(*) FROM jobs c
                WHERE c.parent_id = j.id
                  AND (c.status IN ('runnable', 'executing', 'awaiting') OR c.id IN (SELECT p.id FROM picked p)))
           END AS live_children,
           -- the default key for a job of a queue made fair since it ran (JobRetry)
           (SELECT '' FROM queues q WHERE q.name = j.queue AND q.fairness <> 'none') AS fair_default
    FROM jobs j JOIN picked p ON p.id = j.id
    WHERE j.status IN ('failed', 'cancelled')
    ORDER BY j.id
    FOR UPDATE OF j
),
retried AS (
    UPDATE jobs j
    SET status = CASE WHEN t.signalled THEN 'runnable'
                      WHEN t.cancelled_while = 'awaiting_signal' THEN 'awaiting'
                      WHEN t.live_children > 0 THEN 'awaiting'
                      ELSE 'runnable' END,
        eligible_at = CASE WHEN t.signalled THEN now()
                           WHEN t.cancelled_while = 'awaiting_signal' OR t.live_children > 0
                           THEN j.eligible_at ELSE now() END,
        wake = CASE WHEN t.signalled THEN 'signal'
                    WHEN t.live_children = 0 THEN 'children'
                    WHEN t.live_children > 0 OR t.cancelled_while = 'awaiting_signal' THEN NULL
                    ELSE j.wake END,
        pending_children = coalesce(t.live_children, j.pending_children),
        awaiting = CASE WHEN t.cancelled_while = 'awaiting_signal' THEN j.awaiting END,
        error = CASE WHEN t.cancelled_while IN ('awaiting_signal', 'awaiting_children') THEN NULL
                     ELSE j.error END,
        attempt = 0, finished_at = NULL, cancel_requested = false, cancelled_while = NULL,
        fairness_key = coalesce(j.fairness_key, t.fair_default),
        updated_at = now()
    FROM target t
    WHERE j.id = t.id
    RETURNING j.id, j.queue, j.parent_id, j.status
),
parent AS (
    UPDATE jobs p
    SET pending_children = p.pending_children + d.n, updated_at = now()
    FROM (SELECT r.parent_id, count(*) AS n FROM retried r
          WHERE r.parent_id IS NOT NULL GROUP BY r.parent_id ORDER BY r.parent_id) d
    WHERE p.id = d.parent_id AND p.status = 'awaiting' AND p.pending_children > 0
      AND p.id NOT IN (SELECT r.id FROM retried r)
),
notified AS (
    SELECT count(pg_notify('gendurable_jobs', q.queue)) AS n
    FROM (SELECT DISTINCT r.queue FROM retried r WHERE r.status = 'runnable') q
)
SELECT (SELECT count(*) FROM candidates) > (SELECT count(*) FROM retried) AS more,
       (SELECT count(*) FROM retried) AS changed,
       n.n
FROM notified n;
