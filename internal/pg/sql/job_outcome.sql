-- name: JobApplyOutcomes :many
-- Applies a batch of step outcomes in one statement: one JSON record per step. (Twelve
-- typed arrays through ROWS FROM (unnest ...) were measured slower: 29 against 21 µs
-- per step for a batch of 100 `done` outcomes, the arrays' binding and the function
-- scan costing more than one jsonb document). A retry always carries its delay: the retry
-- policy is Go's (engine.RetryDelay), computed from the handler's settings the claim returned.
--
-- Fencing: a row changes only while it is still `executing` under the lease token the
-- step was given; a stale outcome matches nothing and the caller sees it missing from
-- the result. The new status is decided by gendurable_outcome_status() on the row's
-- latest version: when this UPDATE waited on a signal delivery's row lock, Postgres
-- re-evaluates the SET list on the delivered version, so an `await` that raced a signal
-- it names sees it in late_signals and parks as runnable (no lost wakeup); a signal it
-- does not name leaves it parked.
-- Consuming the signals the step saw is the watermark consumed_seq := claim_inbox_seq.
-- In the same statement: the steps history row, the children of a `spawn`, and the
-- parent join (pending_children - 1, woken at zero) for outcomes that end a child.
-- JobApplyOutcomesCrediting is the same statement plus the CTE `credited`, which gives
-- back the gate slots the steps held (TestStatementCopiesAgree holds the two in step).
-- Batches without a gated step use the plain one: referencing gate_slots costs every
-- outcome statement its locks and planning (measured: ~20 % of a drain's throughput)
-- even when no gate exists.
-- Index use: jobs_pkey per step (+ per distinct parent); no scan grows with the table.
WITH o AS (
    SELECT (r->>'id')::bigint AS id, (r->>'token')::uuid AS token, r->>'kind' AS kind, r->>'label' AS label,
           r->'state' AS state, r->'result' AS result, r->'error' AS error,
           (r->>'delay_ms')::bigint AS delay_ms, (r->>'timeout_ms')::bigint AS timeout_ms,
           CASE WHEN r ? 'awaiting' THEN ARRAY(SELECT jsonb_array_elements_text(r->'awaiting')) END AS awaiting,
           r->'children' AS children, (r->>'http_status')::int AS http_status,
           r->'bodies' AS bodies  -- absent (NULL) unless the queue keeps this attempt's bodies
    FROM jsonb_array_elements(sqlc.arg(batch)::jsonb) AS r
),
-- The step and attempt being completed, as claimed (they do not change under a lease).
-- Every join to the records is by (id, token): a batch may hold a stale outcome of a job
-- beside its current one (a process whose lease was taken back answering late), and a
-- join by id alone would write its history row and children under the current attempt.
before AS (
    SELECT j.id, j.lease_token AS token, j.step, j.attempt, j.attempted_at, j.concurrency_key, j.gate_shard
    FROM jobs j JOIN o ON o.id = j.id AND j.lease_token = o.token
    -- (no `id = ANY(...)` here: inlined into history, it repeats the array per row)
),
updated AS (
    UPDATE jobs j
    -- The new status is decided once per row (n.status) and the columns that follow it
    -- are derived from it. n.late: a signal this await is waiting for arrived after the
    -- claim (or the claim left signals unseen beyond the per-step cap and one of them
    -- matches): the park turns into runnable at once. Signals delivered during the step
    -- are read from the row (late_signals, see migration 0005) because this subquery is
    -- re-evaluated on the delivered row version; the unseen backlog was committed before
    -- the claim, so the statement's snapshot holds it (one signals_inbox probe, only run
    -- when a signal arrived that the row's names do not settle).
    -- n.advances: the step is complete and the job moves to the next one (a spawn that a
    -- cancel ends creates no children, so it stays at its step: a retry runs it again).
    SET (status, eligible_at, finished_at, wake, cancelled_while,
         step, attempt, consumed_seq, state, pending_children) = (
        SELECT n.status,
               CASE WHEN n.status = 'runnable' THEN
                        -- A retry's delay is always given: the engine computes its backoff.
                        CASE WHEN o.kind IN ('await', 'spawn') THEN now()
                             ELSE now() + coalesce(o.delay_ms, 0) * interval '1 millisecond' END
                    -- An await's deadline, also kept by a cancelled one for its retry.
                    WHEN n.status = 'awaiting' OR (o.kind = 'await' AND n.status = 'cancelled') THEN
                        CASE WHEN o.timeout_ms IS NULL THEN 'infinity'::timestamptz
                             ELSE now() + o.timeout_ms * interval '1 millisecond' END
                    ELSE j.eligible_at END,
               CASE WHEN n.status IN ('done', 'failed', 'cancelled') THEN now() END,
               CASE WHEN o.kind = 'retry' THEN j.wake  -- the same step again: same reason
                    WHEN n.status <> 'runnable' THEN NULL  -- a wake reason only for a job that runs
                    WHEN o.kind = 'await' AND n.late THEN 'signal'
                    WHEN o.kind = 'spawn' AND n.children = 0 THEN 'children'
                    END,
               CASE WHEN n.status <> 'cancelled' THEN NULL
                    WHEN o.kind = 'await' THEN 'awaiting_signal'
                    ELSE 'executing' END,
               CASE WHEN n.advances THEN j.step + 1 ELSE j.step END,
               CASE WHEN n.advances AND n.status NOT IN ('done', 'failed', 'cancelled') THEN 0 ELSE j.attempt END,  -- a finished job keeps its last attempt
               CASE WHEN n.advances THEN j.claim_inbox_seq ELSE j.consumed_seq END,
               CASE WHEN n.advances AND o.kind <> 'done' AND o.state IS NOT NULL THEN o.state ELSE j.state END,
               CASE WHEN o.kind = 'spawn' AND n.advances THEN n.children ELSE j.pending_children END
        FROM (SELECT s.late, s.children, s.status, s.status <> 'cancelled' AND o.kind IN ('next', 'await', 'spawn', 'done')
                          OR s.status = 'cancelled' AND o.kind IN ('next', 'await') AS advances
              FROM (SELECT l.late, l.children,
                           gendurable_outcome_status(o.kind, j.attempt, j.max_attempts, j.cancel_requested,
                                                     l.late, l.children) AS status
                    FROM (SELECT coalesce(jsonb_array_length(o.children), 0) AS children,
                                 CASE
                                 WHEN o.kind <> 'await' OR j.inbox_seq <= j.claim_inbox_seq THEN false
                                 WHEN o.awaiting IS NULL THEN true
                                 WHEN j.late_signals && o.awaiting OR cardinality(j.late_signals) >= 64 THEN true
                                 ELSE EXISTS (SELECT 1 FROM signals s
                                              WHERE s.job_id = j.id AND s.seq > j.claim_inbox_seq
                                                AND s.name = ANY (o.awaiting))
                                 END AS late OFFSET 0) l OFFSET 0) s) n),
        result = CASE WHEN o.kind = 'done' THEN o.result ELSE j.result END,
        error = CASE WHEN o.kind IN ('fail', 'retry') THEN o.error
                     WHEN o.kind IN ('next', 'await', 'spawn', 'done') THEN NULL
                     ELSE j.error END,
        awaiting = CASE WHEN o.kind = 'await' THEN o.awaiting END,
        lease_token = NULL,
        lease_expires_at = NULL,
        lease_owner = NULL,
        gate_shard = NULL,
        late_signals = NULL,
        updated_at = now()
    FROM o
    -- The fence is the lease token alone: only an executing row holds one (the CHECK
    -- jobs_lease_token_iff_executing of migration 0005). A `status = 'executing'` test
    -- here would let the planner read the partial index jobs_lease, which holds every
    -- step in flight, and hash-join it (measured: 5 ms for 18 outcomes at 9 000
    -- executing); by id and token it is one primary-key lookup per outcome.
    WHERE j.id = o.id
      AND j.lease_token = o.token
      AND j.id = ANY (ARRAY(SELECT o2.id FROM o o2))
    RETURNING j.id, o.token::uuid AS token, j.status, j.queue, j.handler, j.parent_id, j.eligible_at, j.attempted_at, o.label::text AS label,
              -- A spawn's children ride along: the children CTE reads them from here, not
              -- by joining back to o (that join was a nested loop rescanning o per updated
              -- row: 4 ms of a 12 ms statement for 256 `next` outcomes).
              CASE WHEN o.kind = 'spawn' THEN o.children END AS children,
              -- and the parent's trace context, which a child without one of its own continues
              CASE WHEN o.kind = 'spawn' THEN j.trace_context END AS trace_context,
              -- and its fairness key, which a child without one of its own inherits
              CASE WHEN o.kind = 'spawn' THEN j.fairness_key END AS fairness_key
),
history AS (
    INSERT INTO steps (job_id, queue, handler, step, attempt, outcome, http_status, started_at, finished_at, error, bodies)
    SELECT u.id, u.queue, u.handler, b.step, b.attempt, o.label, o.http_status, coalesce(b.attempted_at, now()), now(), o.error,
           -- Bodies flagged by_queue (an outcome reported through the API) are kept as the
           -- job's queue says: 'all', or 'failures' for a retry or a fail; the queue is
           -- read only for them (one primary-key probe), never for the dispatcher's.
           CASE WHEN o.bodies IS NULL OR o.bodies->'by_queue' IS NULL THEN o.bodies
                WHEN coalesce((SELECT q.step_bodies FROM queues q WHERE q.name = u.queue), 'failures')
                     IN ('all', CASE WHEN o.kind IN ('retry', 'fail') THEN 'failures' END)
                THEN o.bodies - 'by_queue' END
    FROM updated u JOIN o ON o.id = u.id AND o.token = u.token JOIN before b ON b.id = u.id
),
children AS (
    INSERT INTO jobs (queue, handler, input, key, priority, eligible_at, concurrency_key,
                      rate_limit, rate_key, rate_weight, max_attempts, parent_id, trace_context, fairness_key)
    SELECT coalesce(c.queue, u.queue), c.handler, coalesce(c.input, '{}'::jsonb), c.key,
           coalesce(c.priority, 5),
           coalesce(c.run_at, now() + coalesce(c.delay_ms, 0) * interval '1 millisecond'),
           c.concurrency_key, c.rate_limit, c.rate_key, coalesce(c.rate_weight, 1),
           coalesce(c.max_attempts, h.max_attempts, 5), u.id, coalesce(c.trace_context, u.trace_context),
           -- a fair queue's jobs all have a key ('' by default, as an insert gives them)
           coalesce(c.fairness_key, u.fairness_key,
                    CASE WHEN coalesce(c.queue, u.queue) IN (SELECT q.name FROM queues q WHERE q.fairness <> 'none') THEN '' END)
    FROM updated u
    CROSS JOIN LATERAL jsonb_to_recordset(u.children) AS c(
        queue text, handler text, input jsonb, key text, priority smallint, run_at timestamptz,
        delay_ms bigint, concurrency_key text, rate_limit text, rate_key text, rate_weight int,
        max_attempts int, trace_context text, fairness_key text)
    LEFT JOIN handlers h ON h.name = c.handler
    WHERE u.children IS NOT NULL AND u.status IN ('awaiting', 'runnable')
    RETURNING queue
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
    FROM (SELECT queue FROM joined WHERE status = 'runnable'
          UNION SELECT queue FROM children) q
)
-- The handler, the history row's outcome label and the attempt's start and end, as the
-- row holds them: what the process counts into the charts' rollups (engine.StepRollups).
-- ready (the job can be claimed now: the dispatcher's feeder claims again at once) needs
-- the status: a finished job keeps its old, due eligible_at, and woke the feeder for an
-- empty claim and a ready probe after every finished step's batch.
SELECT u.id, u.token, u.status, u.queue, coalesce(u.status = 'runnable' AND u.eligible_at <= now(), false)::bool AS ready,
       u.handler, u.label, coalesce(u.attempted_at, now())::timestamptz AS started_at, now()::timestamptz AS finished_at
FROM updated u, notified;

-- name: JobApplyOutcomesCrediting :many
-- Applies a batch of step outcomes in one statement: one JSON record per step. (Twelve
-- typed arrays through ROWS FROM (unnest ...) were measured slower: 29 against 21 µs
-- per step for a batch of 100 `done` outcomes, the arrays' binding and the function
-- scan costing more than one jsonb document). A retry always carries its delay: the retry
-- policy is Go's (engine.RetryDelay), computed from the handler's settings the claim returned.
--
-- Fencing: a row changes only while it is still `executing` under the lease token the
-- step was given; a stale outcome matches nothing and the caller sees it missing from
-- the result. The new status is decided by gendurable_outcome_status() on the row's
-- latest version: when this UPDATE waited on a signal delivery's row lock, Postgres
-- re-evaluates the SET list on the delivered version, so an `await` that raced a signal
-- it names sees it in late_signals and parks as runnable (no lost wakeup); a signal it
-- does not name leaves it parked.
-- Consuming the signals the step saw is the watermark consumed_seq := claim_inbox_seq.
-- In the same statement: the steps history row, the children of a `spawn`, and the
-- parent join (pending_children - 1, woken at zero) for outcomes that end a child.
-- JobApplyOutcomesCrediting is the same statement plus the CTE `credited`, which gives
-- back the gate slots the steps held (TestStatementCopiesAgree holds the two in step).
-- Batches without a gated step use the plain one: referencing gate_slots costs every
-- outcome statement its locks and planning (measured: ~20 % of a drain's throughput)
-- even when no gate exists.
-- Index use: jobs_pkey per step (+ per distinct parent); no scan grows with the table.
WITH o AS (
    SELECT (r->>'id')::bigint AS id, (r->>'token')::uuid AS token, r->>'kind' AS kind, r->>'label' AS label,
           r->'state' AS state, r->'result' AS result, r->'error' AS error,
           (r->>'delay_ms')::bigint AS delay_ms, (r->>'timeout_ms')::bigint AS timeout_ms,
           CASE WHEN r ? 'awaiting' THEN ARRAY(SELECT jsonb_array_elements_text(r->'awaiting')) END AS awaiting,
           r->'children' AS children, (r->>'http_status')::int AS http_status,
           r->'bodies' AS bodies  -- absent (NULL) unless the queue keeps this attempt's bodies
    FROM jsonb_array_elements(sqlc.arg(batch)::jsonb) AS r
),
-- The step and attempt being completed, as claimed (they do not change under a lease).
-- Every join to the records is by (id, token): a batch may hold a stale outcome of a job
-- beside its current one (a process whose lease was taken back answering late), and a
-- join by id alone would write its history row and children under the current attempt.
before AS (
    SELECT j.id, j.lease_token AS token, j.step, j.attempt, j.attempted_at, j.concurrency_key, j.gate_shard
    FROM jobs j JOIN o ON o.id = j.id AND j.lease_token = o.token
    -- (no `id = ANY(...)` here: inlined into history, it repeats the array per row)
),
updated AS (
    UPDATE jobs j
    -- The new status is decided once per row (n.status) and the columns that follow it
    -- are derived from it. n.late: a signal this await is waiting for arrived after the
    -- claim (or the claim left signals unseen beyond the per-step cap and one of them
    -- matches): the park turns into runnable at once. Signals delivered during the step
    -- are read from the row (late_signals, see migration 0005) because this subquery is
    -- re-evaluated on the delivered row version; the unseen backlog was committed before
    -- the claim, so the statement's snapshot holds it (one signals_inbox probe, only run
    -- when a signal arrived that the row's names do not settle).
    -- n.advances: the step is complete and the job moves to the next one (a spawn that a
    -- cancel ends creates no children, so it stays at its step: a retry runs it again).
    SET (status, eligible_at, finished_at, wake, cancelled_while,
         step, attempt, consumed_seq, state, pending_children) = (
        SELECT n.status,
               CASE WHEN n.status = 'runnable' THEN
                        -- A retry's delay is always given: the engine computes its backoff.
                        CASE WHEN o.kind IN ('await', 'spawn') THEN now()
                             ELSE now() + coalesce(o.delay_ms, 0) * interval '1 millisecond' END
                    -- An await's deadline, also kept by a cancelled one for its retry.
                    WHEN n.status = 'awaiting' OR (o.kind = 'await' AND n.status = 'cancelled') THEN
                        CASE WHEN o.timeout_ms IS NULL THEN 'infinity'::timestamptz
                             ELSE now() + o.timeout_ms * interval '1 millisecond' END
                    ELSE j.eligible_at END,
               CASE WHEN n.status IN ('done', 'failed', 'cancelled') THEN now() END,
               CASE WHEN o.kind = 'retry' THEN j.wake  -- the same step again: same reason
                    WHEN n.status <> 'runnable' THEN NULL  -- a wake reason only for a job that runs
                    WHEN o.kind = 'await' AND n.late THEN 'signal'
                    WHEN o.kind = 'spawn' AND n.children = 0 THEN 'children'
                    END,
               CASE WHEN n.status <> 'cancelled' THEN NULL
                    WHEN o.kind = 'await' THEN 'awaiting_signal'
                    ELSE 'executing' END,
               CASE WHEN n.advances THEN j.step + 1 ELSE j.step END,
               CASE WHEN n.advances AND n.status NOT IN ('done', 'failed', 'cancelled') THEN 0 ELSE j.attempt END,  -- a finished job keeps its last attempt
               CASE WHEN n.advances THEN j.claim_inbox_seq ELSE j.consumed_seq END,
               CASE WHEN n.advances AND o.kind <> 'done' AND o.state IS NOT NULL THEN o.state ELSE j.state END,
               CASE WHEN o.kind = 'spawn' AND n.advances THEN n.children ELSE j.pending_children END
        FROM (SELECT s.late, s.children, s.status, s.status <> 'cancelled' AND o.kind IN ('next', 'await', 'spawn', 'done')
                          OR s.status = 'cancelled' AND o.kind IN ('next', 'await') AS advances
              FROM (SELECT l.late, l.children,
                           gendurable_outcome_status(o.kind, j.attempt, j.max_attempts, j.cancel_requested,
                                                     l.late, l.children) AS status
                    FROM (SELECT coalesce(jsonb_array_length(o.children), 0) AS children,
                                 CASE
                                 WHEN o.kind <> 'await' OR j.inbox_seq <= j.claim_inbox_seq THEN false
                                 WHEN o.awaiting IS NULL THEN true
                                 WHEN j.late_signals && o.awaiting OR cardinality(j.late_signals) >= 64 THEN true
                                 ELSE EXISTS (SELECT 1 FROM signals s
                                              WHERE s.job_id = j.id AND s.seq > j.claim_inbox_seq
                                                AND s.name = ANY (o.awaiting))
                                 END AS late OFFSET 0) l OFFSET 0) s) n),
        result = CASE WHEN o.kind = 'done' THEN o.result ELSE j.result END,
        error = CASE WHEN o.kind IN ('fail', 'retry') THEN o.error
                     WHEN o.kind IN ('next', 'await', 'spawn', 'done') THEN NULL
                     ELSE j.error END,
        awaiting = CASE WHEN o.kind = 'await' THEN o.awaiting END,
        lease_token = NULL,
        lease_expires_at = NULL,
        lease_owner = NULL,
        gate_shard = NULL,
        late_signals = NULL,
        updated_at = now()
    FROM o
    -- The fence is the lease token alone: only an executing row holds one (the CHECK
    -- jobs_lease_token_iff_executing of migration 0005). A `status = 'executing'` test
    -- here would let the planner read the partial index jobs_lease, which holds every
    -- step in flight, and hash-join it (measured: 5 ms for 18 outcomes at 9 000
    -- executing); by id and token it is one primary-key lookup per outcome.
    WHERE j.id = o.id
      AND j.lease_token = o.token
      AND j.id = ANY (ARRAY(SELECT o2.id FROM o o2))
    RETURNING j.id, o.token::uuid AS token, j.status, j.queue, j.handler, j.parent_id, j.eligible_at, j.attempted_at, o.label::text AS label,
              -- A spawn's children ride along: the children CTE reads them from here, not
              -- by joining back to o (that join was a nested loop rescanning o per updated
              -- row: 4 ms of a 12 ms statement for 256 `next` outcomes).
              CASE WHEN o.kind = 'spawn' THEN o.children END AS children,
              -- and the parent's trace context, which a child without one of its own continues
              CASE WHEN o.kind = 'spawn' THEN j.trace_context END AS trace_context,
              -- and its fairness key, which a child without one of its own inherits
              CASE WHEN o.kind = 'spawn' THEN j.fairness_key END AS fairness_key
),
history AS (
    INSERT INTO steps (job_id, queue, handler, step, attempt, outcome, http_status, started_at, finished_at, error, bodies)
    SELECT u.id, u.queue, u.handler, b.step, b.attempt, o.label, o.http_status, coalesce(b.attempted_at, now()), now(), o.error,
           -- Bodies flagged by_queue (an outcome reported through the API) are kept as the
           -- job's queue says: 'all', or 'failures' for a retry or a fail; the queue is
           -- read only for them (one primary-key probe), never for the dispatcher's.
           CASE WHEN o.bodies IS NULL OR o.bodies->'by_queue' IS NULL THEN o.bodies
                WHEN coalesce((SELECT q.step_bodies FROM queues q WHERE q.name = u.queue), 'failures')
                     IN ('all', CASE WHEN o.kind IN ('retry', 'fail') THEN 'failures' END)
                THEN o.bodies - 'by_queue' END
    FROM updated u JOIN o ON o.id = u.id AND o.token = u.token JOIN before b ON b.id = u.id
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
),
children AS (
    INSERT INTO jobs (queue, handler, input, key, priority, eligible_at, concurrency_key,
                      rate_limit, rate_key, rate_weight, max_attempts, parent_id, trace_context, fairness_key)
    SELECT coalesce(c.queue, u.queue), c.handler, coalesce(c.input, '{}'::jsonb), c.key,
           coalesce(c.priority, 5),
           coalesce(c.run_at, now() + coalesce(c.delay_ms, 0) * interval '1 millisecond'),
           c.concurrency_key, c.rate_limit, c.rate_key, coalesce(c.rate_weight, 1),
           coalesce(c.max_attempts, h.max_attempts, 5), u.id, coalesce(c.trace_context, u.trace_context),
           -- a fair queue's jobs all have a key ('' by default, as an insert gives them)
           coalesce(c.fairness_key, u.fairness_key,
                    CASE WHEN coalesce(c.queue, u.queue) IN (SELECT q.name FROM queues q WHERE q.fairness <> 'none') THEN '' END)
    FROM updated u
    CROSS JOIN LATERAL jsonb_to_recordset(u.children) AS c(
        queue text, handler text, input jsonb, key text, priority smallint, run_at timestamptz,
        delay_ms bigint, concurrency_key text, rate_limit text, rate_key text, rate_weight int,
        max_attempts int, trace_context text, fairness_key text)
    LEFT JOIN handlers h ON h.name = c.handler
    WHERE u.children IS NOT NULL AND u.status IN ('awaiting', 'runnable')
    RETURNING queue
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
    FROM (SELECT queue FROM joined WHERE status = 'runnable'
          UNION SELECT queue FROM children) q
)
-- The handler, the history row's outcome label and the attempt's start and end, as the
-- row holds them: what the process counts into the charts' rollups (engine.StepRollups).
SELECT u.id, u.token, u.status, u.queue, coalesce(u.status = 'runnable' AND u.eligible_at <= now(), false)::bool AS ready,
       u.handler, u.label, coalesce(u.attempted_at, now())::timestamptz AS started_at, now()::timestamptz AS finished_at
FROM updated u, notified;

-- name: JobApplyPlainOutcomes :many
-- JobApplyOutcomes for a batch of plain outcomes only: `next` and `done` reported by the
-- dispatcher, which knows each step's attempt from the claim and holds no gate slot for
-- any of them. It writes what JobApplyOutcomes writes for these two kinds (checked by
-- TestPlainOutcomesWriteWhatTheGeneralStatementWrites) in a quarter of its plan: typed
-- arrays instead of a JSON document, no second read of each row for the history (the
-- step is the row's new step - 1, the attempt the caller's), and no spawn. Measured with
-- BenchmarkStepStatements: PostgreSQL CPU 41.8 -> 33.8 µs a step.
-- Fencing, the re-evaluation on a row a signal delivery changed meanwhile, and the
-- parent join are JobApplyOutcomes' (see there); a cancel requested during the step
-- makes a `next` cancelled, as gendurable_outcome_status() says.
WITH o AS (
    -- The tokens come as text: pgx has no binary encoding of a Go string as uuid, and its
    -- failed attempt (an error formatting the whole array) cost more than the cast. The
    -- payloads and bodies come as text too ('' for none), cast here: a jsonb[] parameter
    -- is parsed element by element at bind time at about four times the cost (5 000
    -- elements of {"steps":1}: 8.3-9.0 ms as jsonb[], 2.2-2.8 ms as text[] cast).
    SELECT r.id, r.token::uuid AS token, r.kind, r.label, r.attempt, r.http_status, nullif(r.payload, '')::jsonb AS payload,
           r.delay_ms, nullif(r.bodies, '')::jsonb AS bodies,
           r.ord
    FROM ROWS FROM (unnest(sqlc.arg(ids)::bigint[]),
                    unnest(sqlc.arg(tokens)::text[]),
                    unnest(sqlc.arg(kinds)::text[]),
                    unnest(sqlc.arg(labels)::text[]),
                    unnest(sqlc.arg(attempts)::int[]),
                    unnest(sqlc.arg(http_statuses)::int[]),
                    unnest(sqlc.arg(payloads)::text[]),
                    unnest(sqlc.arg(delays_ms)::bigint[]),
                    unnest(sqlc.arg(bodies)::text[])) WITH ORDINALITY
        AS r(id, token, kind, label, attempt, http_status, payload, delay_ms, bodies, ord)
),
updated AS (
    UPDATE jobs j
    SET status = CASE WHEN o.kind = 'done' THEN 'done' WHEN j.cancel_requested THEN 'cancelled' ELSE 'runnable' END,
        eligible_at = CASE WHEN o.kind = 'next' AND NOT j.cancel_requested
                           THEN now() + coalesce(o.delay_ms, 0) * interval '1 millisecond'
                           ELSE j.eligible_at END,
        finished_at = CASE WHEN o.kind = 'done' OR j.cancel_requested THEN now() END,
        wake = NULL,
        cancelled_while = CASE WHEN o.kind = 'next' AND j.cancel_requested THEN 'executing' END,
        step = j.step + 1,
        attempt = CASE WHEN o.kind = 'next' AND NOT j.cancel_requested THEN 0 ELSE j.attempt END,
        consumed_seq = j.claim_inbox_seq,
        state = CASE WHEN o.kind = 'next' AND o.payload IS NOT NULL THEN o.payload ELSE j.state END,
        result = CASE WHEN o.kind = 'done' THEN o.payload ELSE j.result END,
        error = NULL,
        awaiting = NULL,
        lease_token = NULL,
        lease_expires_at = NULL,
        lease_owner = NULL,
        gate_shard = NULL,
        late_signals = NULL,
        updated_at = now()
    FROM o
    WHERE j.id = o.id
      AND j.lease_token = o.token
      AND j.id = ANY (sqlc.arg(ids)::bigint[])
    RETURNING j.id, o.ord, j.status, j.queue, j.handler, j.parent_id, j.eligible_at, j.attempted_at,
              j.step - 1 AS step, o.attempt, o.label::text AS label, o.http_status, o.bodies
),
history AS (
    INSERT INTO steps (job_id, queue, handler, step, attempt, outcome, http_status, started_at, finished_at, error, bodies)
    SELECT u.id, u.queue, u.handler, u.step, u.attempt, u.label, u.http_status, coalesce(u.attempted_at, now()), now(), NULL, u.bodies
    FROM updated u
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
-- Each applied outcome is answered by its place in the arrays (ord, from 1), not by its
-- lease token: the caller has the token, and reading a uuid back as text was a string
-- made for every row.
SELECT u.id, u.ord::bigint AS ord, u.status, u.queue, coalesce(u.status = 'runnable' AND u.eligible_at <= now(), false)::bool AS ready,
       u.handler, u.label, coalesce(u.attempted_at, now())::timestamptz AS started_at, now()::timestamptz AS finished_at
FROM updated u, notified;
