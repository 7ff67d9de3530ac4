-- name: JobApplyOutcomes :many
-- JobApplyOutcomes (sql/job_outcome.sql) on Citus, for the outcomes of one shard
-- (`placements`): its CTEs o, updated and joined, each filtered to the shard, so Citus
-- routes the statement whole (Task Count 1). What Citus does not route is left to the
-- statements sent with it in the same transaction (pg.citusApplyOutcomes): the history
-- rows (StepInsertApplied reads outcome_token, outcome_step and outcome_attempt, which
-- updated sets), a spawn's children (JobInsertChildren) and the wake-ups (pg_notify on
-- the coordinator, for the queues this statement answers in `woken`). The fencing, the
-- late-signal re-check and the parent join are the plain statement's, copied
-- (TestCitusStatementCopiesAgree holds them to it). Its parameters are positional, $1 the
-- batch and $2 the placements: sqlc rewrites no named parameter inside the SET list's
-- subquery ("edits overlap").
WITH o AS (
    SELECT (r->>'id')::bigint AS id, (r->>'token')::uuid AS token, r->>'kind' AS kind, r->>'label' AS label,
           r->'state' AS state, r->'result' AS result, r->'error' AS error,
           (r->>'delay_ms')::bigint AS delay_ms, (r->>'timeout_ms')::bigint AS timeout_ms,
           CASE WHEN r ? 'awaiting' THEN ARRAY(SELECT jsonb_array_elements_text(r->'awaiting')) END AS awaiting,
           r->'children' AS children, (r->>'http_status')::int AS http_status,
           r->'bodies' AS bodies  -- absent (NULL) unless the queue keeps this attempt's bodies
    , now() AS now, now() + coalesce((r->>'delay_ms')::bigint, 0) * interval '1 millisecond' AS run_at,
      now() + (r->>'timeout_ms')::bigint * interval '1 millisecond' AS deadline  -- the clock, read here (docs/citus.md)
    FROM jsonb_array_elements($1::jsonb) AS r
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
                        CASE WHEN o.kind IN ('await', 'spawn') THEN o.now
                             ELSE o.run_at END
                    -- An await's deadline, also kept by a cancelled one for its retry.
                    WHEN n.status = 'awaiting' OR (o.kind = 'await' AND n.status = 'cancelled') THEN
                        CASE WHEN o.timeout_ms IS NULL THEN 'infinity'::timestamptz
                             ELSE o.deadline END
                    ELSE j.eligible_at END,
               CASE WHEN n.status IN ('done', 'failed', 'cancelled') THEN o.now END,
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
                                              WHERE s.placement = ANY ($2::int[]) AND s.placement = j.placement AND s.job_id = j.id AND s.seq > j.claim_inbox_seq
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
        updated_at = o.now,
        -- what the history INSERT that follows reads (the step and attempt as claimed)
        outcome_token = o.token, outcome_step = j.step, outcome_attempt = j.attempt
    FROM o
    -- The fence is the lease token alone: only an executing row holds one (the CHECK
    -- jobs_lease_token_iff_executing of migration 0005). A `status = 'executing'` test
    -- here would let the planner read the partial index jobs_lease, which holds every
    -- step in flight, and hash-join it (measured: 5 ms for 18 outcomes at 9 000
    -- executing); by id and token it is one primary-key lookup per outcome.
    WHERE j.placement = ANY ($2::int[])
      AND j.id = o.id
      AND j.lease_token = o.token
      AND j.id = ANY (ARRAY(SELECT o2.id FROM o o2))
    RETURNING o.now, j.id, o.token::uuid AS token, j.status, j.queue, j.handler, j.parent_id, j.parent_join, j.eligible_at, j.attempted_at, o.label::text AS label,
              -- A spawn's children ride along: the children CTE reads them from here, not
              -- by joining back to o (that join was a nested loop rescanning o per updated
              -- row: 4 ms of a 12 ms statement for 256 `next` outcomes).
              CASE WHEN o.kind = 'spawn' THEN o.children END AS children
),
joined AS (
    UPDATE jobs p
    SET pending_children = p.pending_children - d.n,
        status = CASE WHEN p.status = 'awaiting' AND p.pending_children <= d.n THEN 'runnable'
                      ELSE p.status END,
        wake = CASE WHEN p.status = 'awaiting' AND p.pending_children <= d.n THEN 'children'
                    ELSE p.wake END,
        eligible_at = CASE WHEN p.status = 'awaiting' AND p.pending_children <= d.n THEN d.now
                           ELSE p.eligible_at END,
        updated_at = d.now,
        -- No outcome of the parent applied here: StepInsertApplied and JobInsertChildren,
        -- which join the rows this transaction wrote, must not take a stale record of it.
        outcome_token = NULL
    FROM (SELECT parent_id, count(*) AS n, min(now) AS now FROM updated
          -- a remote child (parent_join set) joins its parent through a carry of its own,
          -- also when its placement is on its parent's shard (docs/citus.md)
          WHERE parent_id IS NOT NULL AND parent_join IS NULL AND status IN ('done', 'failed', 'cancelled')
          GROUP BY parent_id ORDER BY parent_id) d
    WHERE p.placement = ANY ($2::int[])
      AND p.id = d.parent_id AND p.pending_children > 0
      AND p.id NOT IN (SELECT u.id FROM updated u)
    RETURNING p.queue, p.status
)
SELECT u.id, u.token, u.status, u.queue, coalesce(u.status = 'runnable' AND u.eligible_at <= u.now, false)::bool AS ready,
       u.handler, u.label, coalesce(u.attempted_at, u.now)::timestamptz AS started_at, u.now::timestamptz AS finished_at,
       w.woken::text[] AS woken,
       -- a remote child's end, which the caller carries to its parent next (citus_family.go)
       coalesce(u.parent_join = 'pending' AND u.status IN ('done', 'failed', 'cancelled'), false)::bool AS remote_end
FROM updated u
CROSS JOIN (SELECT array_agg(DISTINCT j.queue) AS woken FROM joined j WHERE j.status = 'runnable') w;

-- name: JobApplyPlainOutcomes :many
-- JobApplyPlainOutcomes (sql/job_outcome.sql) on Citus, for the `next` and `done`
-- outcomes of one shard (`placements`): its CTEs o, updated and joined filtered to the
-- shard (a router statement), the history and the wake-ups left to the statements sent
-- with it (see JobApplyOutcomes here).
WITH o AS (
    -- The tokens come as text: pgx has no binary encoding of a Go string as uuid, and its
    -- failed attempt (an error formatting the whole array) cost more than the cast. The
    -- payloads and bodies come as text too ('' for none), cast here: a jsonb[] parameter
    -- is parsed element by element at bind time at about four times the cost (5 000
    -- elements of {"steps":1}: 8.3-9.0 ms as jsonb[], 2.2-2.8 ms as text[] cast).
    SELECT r.id, r.token::uuid AS token, r.kind, r.label, r.attempt, r.http_status, nullif(r.payload, '')::jsonb AS payload,
           r.delay_ms, nullif(r.bodies, '')::jsonb AS bodies,
           r.ord, now() AS now, now() + coalesce(r.delay_ms, 0) * interval '1 millisecond' AS run_at  -- the clock, read here (docs/citus.md)
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
                           THEN o.run_at
                           ELSE j.eligible_at END,
        finished_at = CASE WHEN o.kind = 'done' OR j.cancel_requested THEN o.now END,
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
        updated_at = o.now,
        outcome_token = o.token, outcome_step = j.step, outcome_attempt = o.attempt
    FROM o
    WHERE j.placement = ANY (sqlc.arg(placements)::int[])
      AND j.id = o.id
      AND j.lease_token = o.token
      AND j.id = ANY (sqlc.arg(ids)::bigint[])
    RETURNING o.now, j.id, o.ord, j.status, j.queue, j.handler, j.parent_id, j.parent_join, j.eligible_at, j.attempted_at,
              j.step - 1 AS step, o.attempt, o.label::text AS label, o.http_status, o.bodies
),
joined AS (
    UPDATE jobs p
    SET pending_children = p.pending_children - d.n,
        status = CASE WHEN p.status = 'awaiting' AND p.pending_children <= d.n THEN 'runnable'
                      ELSE p.status END,
        wake = CASE WHEN p.status = 'awaiting' AND p.pending_children <= d.n THEN 'children'
                    ELSE p.wake END,
        eligible_at = CASE WHEN p.status = 'awaiting' AND p.pending_children <= d.n THEN d.now
                           ELSE p.eligible_at END,
        updated_at = d.now,
        -- No outcome of the parent applied here: StepInsertApplied and JobInsertChildren,
        -- which join the rows this transaction wrote, must not take a stale record of it.
        outcome_token = NULL
    FROM (SELECT parent_id, count(*) AS n, min(now) AS now FROM updated
          -- a remote child (parent_join set) joins its parent through a carry of its own,
          -- also when its placement is on its parent's shard (docs/citus.md)
          WHERE parent_id IS NOT NULL AND parent_join IS NULL AND status IN ('done', 'failed', 'cancelled')
          GROUP BY parent_id ORDER BY parent_id) d
    WHERE p.placement = ANY (sqlc.arg(placements)::int[])
      AND p.id = d.parent_id AND p.pending_children > 0
      AND p.id NOT IN (SELECT u.id FROM updated u)
    RETURNING p.queue, p.status
)
SELECT u.id, u.ord::bigint AS ord, u.status, u.queue, coalesce(u.status = 'runnable' AND u.eligible_at <= u.now, false)::bool AS ready,
       u.handler, u.label, coalesce(u.attempted_at, u.now)::timestamptz AS started_at, u.now::timestamptz AS finished_at,
       w.woken::text[] AS woken,
       -- a remote child's end, which the caller carries to its parent next (citus_family.go)
       coalesce(u.parent_join = 'pending' AND u.status IN ('done', 'failed', 'cancelled'), false)::bool AS remote_end
FROM updated u
CROSS JOIN (SELECT array_agg(DISTINCT j.queue) AS woken FROM joined j WHERE j.status = 'runnable') w;

-- name: StepInsertApplied :exec
-- The history rows of the outcomes the statement before it in the same transaction
-- applied (JobApplyOutcomes, JobApplyPlainOutcomes, JobReapExpiredLeases here): each
-- record joins its row by id and by the lease token that outcome consumed
-- (outcome_token), in the row version this transaction wrote (age(xmin) = 0: its xmin is
-- this transaction's id), so a fenced-off record writes nothing; the step and attempt are
-- the ones it ended. Without the xmin test a record written again after its first write
-- committed (a batch retried after a later shard failed, a commit whose answer was lost)
-- or a late outcome of a claim the reaper took back matched the token the first write
-- left, and wrote a second history row for the claim (TestCitusWorkerDownDuringADrain). An INSERT ... SELECT between colocated tables filtered to one shard,
-- into a table without a sequence default: Citus pushes it down to the shard whole. The
-- id is the statement's microsecond: one history row per job per statement, in order.
-- The caller decides which bodies are kept (JobStepBodiesSetting for an outcome whose bodies
-- follow its queue's setting): a read of queues here made Citus send the statement to
-- every shard.
-- Index use: jobs_pkey per record.
INSERT INTO steps (job_id, id, placement, queue, handler, step, attempt, outcome, http_status,
                   started_at, finished_at, error, bodies)
SELECT j.id, (extract(epoch FROM now()) * 1000000)::bigint, j.placement, j.queue, j.handler,
       j.outcome_step, j.outcome_attempt, o.label, nullif(o.http_status, 0), coalesce(j.attempted_at, now()), now(),
       coalesce(nullif(o.error, '')::jsonb, CASE WHEN o.label = 'lease_expired' THEN j.error END),
       nullif(o.bodies, '')::jsonb
FROM jobs j
JOIN ROWS FROM (unnest(sqlc.arg(ids)::bigint[]), unnest(sqlc.arg(tokens)::text[]), unnest(sqlc.arg(kinds)::text[]),
                unnest(sqlc.arg(labels)::text[]), unnest(sqlc.arg(http_statuses)::int[]),
                unnest(sqlc.arg(errors)::text[]), unnest(sqlc.arg(bodies)::text[]))
     AS o(id, token, kind, label, http_status, error, bodies)
  ON j.id = o.id AND j.outcome_token = o.token::uuid
WHERE j.placement = ANY (sqlc.arg(placements)::int[])
  AND j.id = ANY (sqlc.arg(ids)::bigint[])
  AND age(j.xmin) = 0;

-- name: JobInsertChildren :exec
-- The children of the spawns the statement before it in the same transaction applied
-- (JobApplyOutcomes here): each child joins its parent by id and by the lease token the
-- spawn consumed, in the row version this transaction wrote (age(xmin) = 0, as in
-- StepInsertApplied: a spawn written again must not make its children twice), and only a
-- parent the spawn parked (or made runnable: no children) gets them (a cancelled spawn
-- makes none), as the plain statement's children CTE. A child
-- lives at its parent's placement; its id (drawn beforehand from jobs_id_seq on the
-- coordinator, passed as seq) is seq * 1024 + that placement. Pushed down to the shard.
-- No RETURNING: Citus deparses it against the shard's table wrongly ("missing FROM-clause
-- entry for table jobs"); the caller knows the children's queues.
-- Each child's max_attempts is the caller's (its own, or its handler's: HandlerMaxAttempts):
-- a join to handlers made Citus send the statement to every shard.
-- Index use: jobs_pkey per parent.
INSERT INTO jobs (id, placement, queue, handler, input, key, priority, eligible_at, concurrency_key,
                  max_attempts, parent_id, trace_context, fairness_key)
SELECT c.seq * 1024 + p.placement, p.placement, coalesce(nullif(c.queue, ''), p.queue), c.handler,
       coalesce(nullif(c.input, '')::jsonb, '{}'::jsonb), nullif(c.key, ''), coalesce(nullif(c.priority, -1), 5)::smallint,
       coalesce(nullif(c.run_at, '0001-01-01 00:00:00+00'::timestamptz), now() + c.delay_ms * interval '1 millisecond'),
       nullif(c.concurrency_key, ''), c.max_attempts, p.id,
       -- a child continues the trace of the step that spawned it, else its parent's
       coalesce(nullif(c.trace_context, ''), p.trace_context),
       -- its own fairness key (which places it with its parent: citusRefusedSpawn), else its
       -- parent's, else '' when it names a fair queue (fair_default, the caller's: a
       -- subquery on queues here broke Citus's deparsing), where every live job has one
       coalesce(c.fairness_key, p.fairness_key, c.fair_default)
FROM jobs p
JOIN ROWS FROM (unnest(sqlc.arg(parent_ids)::bigint[]), unnest(sqlc.arg(parent_tokens)::text[]), unnest(sqlc.arg(seqs)::bigint[]),
                unnest(sqlc.arg(queues)::text[]), unnest(sqlc.arg(handlers)::text[]), unnest(sqlc.arg(inputs)::text[]),
                unnest(sqlc.arg(keys)::text[]), unnest(sqlc.arg(priorities)::int[]), unnest(sqlc.arg(run_ats)::timestamptz[]),
                unnest(sqlc.arg(delays_ms)::bigint[]), unnest(sqlc.arg(concurrency_keys)::text[]), unnest(sqlc.arg(max_attempts)::int[]),
                unnest(sqlc.arg(trace_contexts)::text[]), unnest(sqlc.arg(fairness_keys)::text[]),
                unnest(sqlc.arg(fair_defaults)::text[]))
     AS c(parent_id, parent_token, seq, queue, handler, input, key, priority, run_at, delay_ms, concurrency_key, max_attempts,
          trace_context, fairness_key, fair_default)
  ON p.id = c.parent_id AND p.outcome_token = c.parent_token::uuid
WHERE p.placement = ANY (sqlc.arg(placements)::int[])
  AND p.id = ANY (sqlc.arg(parent_ids)::bigint[])
  AND p.status IN ('awaiting', 'runnable')
  AND age(p.xmin) = 0;

-- name: JobIDsDraw :many
-- n job sequence numbers from the coordinator's jobs_id_seq, for the rows an INSERT ...
-- SELECT pushed down to a shard makes (it cannot call nextval there). Runs on the
-- coordinator (no distributed table).
SELECT nextval('jobs_id_seq')::bigint AS seq FROM generate_series(1, sqlc.arg(n)::int);

-- name: JobStepBodiesSetting :one
-- The step_bodies setting of job id's queue ('failures' when the queue has none): what the
-- bodies of an outcome reported through the API are kept by. A router statement.
SELECT coalesce(q.step_bodies, 'failures')::text AS step_bodies
FROM jobs j LEFT JOIN queues q ON q.name = j.queue
WHERE j.placement = sqlc.arg(placement)::int AND j.id = sqlc.arg(id)::bigint;

-- name: HandlerMaxAttempts :many
-- The max_attempts of handlers (a reference table, read on the coordinator): what a spawned
-- child without its own takes.
SELECT h.name, h.max_attempts FROM handlers h WHERE h.name = ANY (sqlc.arg(names)::text[]);
