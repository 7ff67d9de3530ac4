-- name: JobClaimBatch :many
-- Claims up to max_rows runnable jobs of queue queue in one statement and leases them.
--
-- `queue = queue` (never ANY) and one descent of jobs_pick per priority (0-9, a LATERAL
-- each, concatenated in priority order under one LIMIT) hand rows over already in
-- (priority, eligible_at, id) order, and each descent stops at its first row not yet due
-- (one range scan of the queue walked past every not-yet-due row of a more urgent
-- priority: TestPickDoesNotWalkPastNotYetDueRows), so the scans, the SKIP LOCKED lock and
-- the LIMIT stop together after about max_rows rows whatever the backlog. The K=1 concurrency guard is a filter inside
-- that scan, so skipped rows do not use up the batch; row_number() dedups ungated keys
-- within the locked set. The guard is one probe of jobs_concurrency_exclusive per keyed
-- row the scan reads (never executed for keyless rows). It is written as a scalar
-- subquery `(SELECT … LIMIT 1) IS NULL` on purpose: Postgres may turn a `NOT EXISTS`
-- into a hashed SubPlan that reads every executing row once per pick (it did under the
-- generic plan: 100 000 rows hashed, 40 ms a pick at 100 000 executing), but it never
-- hashes a scalar subquery, so the guard stays a probe under any plan.
--
-- Admission then runs over the locked candidates only, and costs nothing when none of
-- them is gated or rate-limited (the slot and bucket scans are never executed). Every
-- read of gates, gate_slots and rate_buckets is a probe by primary key (a scalar
-- subquery per candidate, or `= ANY (ARRAY(...))` of the batch's keys), so a pick never
-- reads a table in proportion to the gates or buckets configured, whatever join the
-- cached plan picks (with IN-joins it hashed a full scan of each: 10 000 gates, 20 000
-- slots and 100 000 buckets read per pick):
--  * gates: the slot rows of the batch's gated keys are locked in (key, shard) order;
--    candidate number r of a key takes the key's r-th free slot (and its shard);
--  * rate limits: the buckets of the batch (every bucket every candidate names: a job
--    may name several) are locked together in (name, key) order and refilled lazily; a
--    bucket seen for the first time starts full (burst) and is inserted already debited
--    (two picks minting the same bucket collide on its primary key: the loser's claim
--    aborts whole and is retried); a candidate is admitted only when, in each of its
--    buckets, the cumulative weight in pick order fits the tokens (see bucket_fits), and every bucket of each winner is debited in this statement: all of
--    them or none.
-- Only the final winners debit slots and tokens; a denied candidate stays runnable and
-- its lock ends with the statement. The UPDATE flips each winner by primary key (one
-- nested loop, batch × PK lookups), sets a fresh lease token, and records the inbox
-- watermark the step will be shown (claim_inbox_seq, capped at signal_cap signals per step).
WITH candidates AS (
    SELECT c.* FROM generate_series(0, 9) AS p(priority)
    CROSS JOIN LATERAL (
        SELECT j.id, j.handler, j.concurrency_key, j.priority, j.eligible_at,
               j.rate_limit, j.rate_key, j.rate_weight, j.extra_rate_limits
        FROM jobs j
        WHERE j.queue = sqlc.arg(queue)::text
          AND j.status = 'runnable'
          AND j.priority = p.priority::smallint
          AND j.eligible_at <= now()
          AND (j.concurrency_key IS NULL OR (
                SELECT e.id FROM jobs e
                WHERE e.concurrency_key = j.concurrency_key
                  AND e.status = 'executing' AND e.gate_shard IS NULL
                LIMIT 1) IS NULL)
        ORDER BY j.eligible_at, j.id
        LIMIT sqlc.arg(max_rows)::int
        FOR UPDATE OF j SKIP LOCKED
    ) c
    LIMIT sqlc.arg(max_rows)::int
),
-- Rows with neither a concurrency key nor a rate limit need no admission: they win as
-- they are, and the windows and sorts below only ever see the others.
plain AS (
    SELECT c.id, c.handler FROM candidates c
    WHERE c.concurrency_key IS NULL AND c.rate_limit IS NULL
),
ranked AS (
    SELECT c.*,
           CASE WHEN c.concurrency_key IS NULL THEN false
                ELSE coalesce((SELECT true FROM gates g WHERE g.key = c.concurrency_key), false) END AS gated,
           row_number() OVER (PARTITION BY c.concurrency_key
                              ORDER BY c.priority, c.eligible_at, c.id) AS key_rank
    FROM candidates c
    WHERE c.concurrency_key IS NOT NULL OR c.rate_limit IS NOT NULL
),
k1 AS (
    SELECT r.* FROM ranked r
    WHERE r.concurrency_key IS NULL OR r.gated OR r.key_rank = 1
),
slots_locked AS (
    SELECT s.key, s.shard, s.available
    FROM gate_slots s
    WHERE EXISTS (SELECT 1 FROM k1 WHERE k1.gated)  -- one-time filter: skipped when unused
      AND s.key = ANY (ARRAY(SELECT DISTINCT k.concurrency_key FROM k1 k WHERE k.gated))
    ORDER BY s.key, s.shard
    FOR UPDATE
),
free_slots AS (
    SELECT l.key, l.shard,
           row_number() OVER (PARTITION BY l.key ORDER BY l.shard, n.n) AS slot_no
    FROM slots_locked l
    CROSS JOIN LATERAL generate_series(1, least(l.available, sqlc.arg(max_rows))) AS n(n)
),
gate_pass AS (
    SELECT k.*, f.shard AS gate_shard
    FROM k1 k
    LEFT JOIN free_slots f ON k.gated AND f.key = k.concurrency_key AND f.slot_no = k.key_rank
    WHERE NOT k.gated OR f.shard IS NOT NULL
),
-- One row per bucket a candidate names: its first limit from the rate_limit columns, the
-- others (a job naming several) from extra_rate_limits, expanded only where not NULL.
candidate_buckets AS (
    SELECT p.id, p.priority, p.eligible_at, p.rate_limit AS name, coalesce(p.rate_key, '') AS key, p.rate_weight AS weight
    FROM gate_pass p
    WHERE p.rate_limit IS NOT NULL
    UNION ALL
    SELECT p.id, p.priority, p.eligible_at, x.name, coalesce(x.key, ''), coalesce(x.weight, 1)
    FROM gate_pass p
    CROSS JOIN LATERAL jsonb_to_recordset(p.extra_rate_limits) AS x(name text, key text, weight int)
    WHERE p.extra_rate_limits IS NOT NULL
),
buckets_needed AS (
    SELECT DISTINCT cb.name, cb.key FROM candidate_buckets cb
),
buckets_locked AS (
    SELECT b.name, b.key, b.tokens, b.updated_at
    FROM rate_buckets b
    WHERE EXISTS (SELECT 1 FROM buckets_needed)  -- one-time filter: skipped when unused
      AND b.name = ANY (ARRAY(SELECT DISTINCT n.name FROM buckets_needed n))
      AND b.key = ANY (ARRAY(SELECT n.key FROM buckets_needed n))
      AND (b.name, b.key) IN (SELECT n.name, n.key FROM buckets_needed n)
    ORDER BY b.name, b.key
    FOR UPDATE
),
buckets_now AS (
    SELECT n.name, n.key, l.name IS NULL AS fresh,
           CASE WHEN l.name IS NULL THEN r.burst
                ELSE least(r.burst, l.tokens + r.rate * greatest(extract(epoch FROM now() - l.updated_at), 0))
           END AS tokens
    FROM buckets_needed n
    JOIN rate_limits r ON r.name = n.name
    LEFT JOIN buckets_locked l ON l.name = n.name AND l.key = n.key
    WHERE EXISTS (SELECT 1 FROM buckets_needed)  -- one-time filter: skipped when unused
),
-- A candidate naming a bucket that cannot hold its weight even alone (an empty bucket, a
-- deleted limit: no tokens row) is hopeless this pick, and takes no part in the sums
-- below. Any other candidate is admitted when, in every bucket it names, the cumulative
-- weight of the non-hopeless candidates naming that bucket, in pick order and up to and
-- including it, fits the bucket's tokens. This never over-debits: a bucket's winners
-- weigh at most the sum up to its last winner, which fits. It may under-admit within one
-- pick (a candidate denied by one bucket still counts in the sums of its others), but
-- never for long: the first non-hopeless candidate is always admitted (nothing precedes
-- it in any of its sums), so each pick makes progress, and one bucket's shortage never
-- holds back another bucket's jobs for good.
bucket_fits AS (
    SELECT h.id, h.name, h.key, h.weight, h.hopeless,
           sum(CASE WHEN h.hopeless THEN 0 ELSE h.weight END)
               OVER (PARTITION BY h.name, h.key ORDER BY h.priority, h.eligible_at, h.id) <= h.tokens AS fits
    FROM (SELECT cb.id, cb.priority, cb.eligible_at, cb.name, cb.key, cb.weight, b.tokens,
                 bool_or(NOT coalesce(cb.weight <= b.tokens, false)) OVER (PARTITION BY cb.id) AS hopeless
          FROM candidate_buckets cb
          LEFT JOIN buckets_now b ON b.name = cb.name AND b.key = cb.key
          WHERE EXISTS (SELECT 1 FROM buckets_needed)  -- one-time filter: skipped when unused
         ) h
),
admitted AS (
    SELECT p.id, p.handler, p.gate_shard, p.concurrency_key
    FROM gate_pass p
    WHERE p.rate_limit IS NULL
       OR NOT EXISTS (SELECT 1 FROM bucket_fits f WHERE f.id = p.id AND (f.hopeless OR NOT f.fits))
),
winners AS (
    SELECT p.id, p.handler, NULL::smallint AS gate_shard FROM plain p
    UNION ALL
    SELECT a.id, a.handler, a.gate_shard FROM admitted a
),
slots_debited AS (
    UPDATE gate_slots s
    SET available = s.available - d.n
    FROM (SELECT a.concurrency_key AS key, a.gate_shard AS shard, count(*) AS n
          FROM admitted a WHERE a.gate_shard IS NOT NULL GROUP BY 1, 2) d
    WHERE EXISTS (SELECT 1 FROM admitted WHERE gate_shard IS NOT NULL)  -- one-time filter
      AND s.key = ANY (ARRAY(SELECT a.concurrency_key FROM admitted a WHERE a.gate_shard IS NOT NULL))
      AND s.key = d.key AND s.shard = d.shard
),
grants AS (
    SELECT f.name, f.key, sum(f.weight) AS weight
    FROM bucket_fits f
    WHERE EXISTS (SELECT 1 FROM buckets_needed)  -- one-time filter: skipped when unused
      AND f.id IN (SELECT a.id FROM admitted a)
    GROUP BY 1, 2
),
buckets_debited AS (
    UPDATE rate_buckets b
    SET tokens = bn.tokens - g.weight, updated_at = now()
    FROM grants g JOIN buckets_now bn ON bn.name = g.name AND bn.key = g.key AND NOT bn.fresh
    WHERE EXISTS (SELECT 1 FROM grants)  -- one-time filter
      AND b.name = ANY (ARRAY(SELECT DISTINCT g2.name FROM grants g2))
      AND b.key = ANY (ARRAY(SELECT g2.key FROM grants g2))
      AND b.name = g.name AND b.key = g.key
),
buckets_minted AS (
    INSERT INTO rate_buckets (name, key, tokens, updated_at)
    SELECT bn.name, bn.key, bn.tokens - g.weight, now()
    FROM grants g JOIN buckets_now bn ON bn.name = g.name AND bn.key = g.key AND bn.fresh
),
claimed AS (
    UPDATE jobs j
    SET status = 'executing',
        attempt = j.attempt + 1,
        lease_token = gen_random_uuid(),
        lease_expires_at = now() + sqlc.arg(lease_ttl_ms)::bigint * interval '1 millisecond',
        lease_owner = sqlc.arg(lease_owner)::text,
        attempted_at = now(),
        claim_inbox_seq = least(j.inbox_seq, j.consumed_seq + sqlc.arg(signal_cap)::bigint),
        gate_shard = w.gate_shard,
        updated_at = now()
    FROM winners w
    WHERE j.id = w.id
      -- Primary-key lookups whatever the planner guesses of LIMIT max_rows: a cached generic plan
      -- estimates a tenth of the table as winners and would otherwise hash-join a full
      -- sequential scan of jobs (measured: 110 ms at 20 000 rows, O(table)).
      AND j.id = ANY (ARRAY(SELECT w2.id FROM winners w2))
    RETURNING j.id, j.queue, j.handler, j.key, j.step, j.attempt, j.max_attempts, j.input,
              j.state, j.created_at, j.lease_token, j.lease_expires_at, j.attempted_at, j.wake,
              j.consumed_seq, j.claim_inbox_seq, j.inbox_seq, j.pending_children, j.gate_shard,
              -- NULL for a job without a trace context: one null bit of the answer's row.
              coalesce(CASE WHEN j.trace_context IS NOT NULL
                   THEN floor(extract(epoch FROM j.eligible_at - '1970-01-01 00:00:00+00'::timestamptz) * 1000000)::bigint::text
                        || ' ' || j.trace_context END,
                       j.trace_context) AS trace  -- (coalesce: typed nullable text by sqlc)
)
-- The handler of each claimed step (nil when it is not registered: the caller fails the
-- step); one handlers_pkey probe per step.
SELECT c.id, c.queue, c.handler, c.key, c.step, c.attempt, c.max_attempts, c.input,
       c.state, c.created_at, c.lease_token::uuid AS lease_token, c.lease_expires_at::timestamptz AS lease_expires_at,
       c.attempted_at::timestamptz AS attempted_at, c.wake,
       c.consumed_seq, c.claim_inbox_seq, c.inbox_seq, c.pending_children, c.gate_shard, c.trace,
       h.url, h.secret, h.previous_secret, h.previous_secret_expires_at, h.timeout_ms,
       h.backoff_base_ms, h.backoff_max_ms,
       -- the handler's circuit breaker, read by the same probe (internal/dispatch/breaker.go)
       h.breaker_state, h.consecutive_failures, h.breaker_next_probe_at, h.paused_at
FROM claimed c LEFT JOIN handlers h ON h.name = c.handler;

-- name: JobClaimPlain :many
-- JobClaimBatch without admission, for a queue whose rows have neither a concurrency key
-- nor a rate limit (the engine's choice: engine.Claim). The same scan locks the same
-- candidates; only the plain ones are claimed, and `others` counts the rest, which this
-- statement leaves runnable (their locks end with it): a claim that meets any goes on
-- with JobClaimBatch, which admits them. The statement is a sixth of JobClaimBatch's
-- plan, and the plan's start and end, its locks on the gate and rate tables and the
-- second lookup of each winner were most of what a plain claim cost: PostgreSQL CPU
-- 41.8 -> 35.8 µs a step in BenchmarkStepStatements. One row per claimed step; when
-- none was claimed, one row with id 0 if there are others, else none.
WITH candidates AS (
    SELECT c.* FROM generate_series(0, 9) AS p(priority)
    CROSS JOIN LATERAL (
        SELECT j.id, j.handler, j.concurrency_key, j.priority, j.eligible_at,
               j.rate_limit, j.rate_key, j.rate_weight, j.extra_rate_limits
        FROM jobs j
        WHERE j.queue = sqlc.arg(queue)::text
          AND j.status = 'runnable'
          AND j.priority = p.priority::smallint
          AND j.eligible_at <= now()
          AND (j.concurrency_key IS NULL OR (
                SELECT e.id FROM jobs e
                WHERE e.concurrency_key = j.concurrency_key
                  AND e.status = 'executing' AND e.gate_shard IS NULL
                LIMIT 1) IS NULL)
        ORDER BY j.eligible_at, j.id
        LIMIT sqlc.arg(max_rows)::int
        FOR UPDATE OF j SKIP LOCKED
    ) c
    LIMIT sqlc.arg(max_rows)::int
),
claimed AS (
    UPDATE jobs j
    SET status = 'executing',
        attempt = j.attempt + 1,
        lease_token = gen_random_uuid(),
        lease_expires_at = now() + sqlc.arg(lease_ttl_ms)::bigint * interval '1 millisecond',
        lease_owner = sqlc.arg(lease_owner)::text,
        attempted_at = now(),
        claim_inbox_seq = least(j.inbox_seq, j.consumed_seq + sqlc.arg(signal_cap)::bigint),
        gate_shard = NULL,
        updated_at = now()
    -- Primary-key lookups of the locked rows (see JobClaimBatch's claimed).
    WHERE j.id = ANY (ARRAY(SELECT c.id FROM candidates c WHERE c.concurrency_key IS NULL AND c.rate_limit IS NULL))
    RETURNING j.id, j.queue, j.handler, j.key, j.step, j.attempt, j.max_attempts, j.input,
              j.state, j.created_at, j.lease_token, j.lease_expires_at, j.attempted_at, j.wake,
              j.consumed_seq, j.claim_inbox_seq, j.inbox_seq, j.pending_children,
              coalesce(CASE WHEN j.trace_context IS NOT NULL
                   THEN floor(extract(epoch FROM j.eligible_at - '1970-01-01 00:00:00+00'::timestamptz) * 1000000)::bigint::text
                        || ' ' || j.trace_context END,
                       j.trace_context) AS trace  -- (coalesce: typed nullable text by sqlc)
)
-- (coalesce only makes the columns of a claimed row non-null to sqlc: the row of a claim
-- that claimed nothing has id 0.)
SELECT coalesce(c.id, 0) AS id, coalesce(c.queue, '') AS queue, coalesce(c.handler, '') AS handler, c.key,
       coalesce(c.step, 0) AS step, coalesce(c.attempt, 0) AS attempt, coalesce(c.max_attempts, 0) AS max_attempts,
       coalesce(c.input, '{}') AS input, c.state, coalesce(c.created_at, now()) AS created_at,
       coalesce(c.lease_token, '00000000-0000-0000-0000-000000000000') AS lease_token,
       coalesce(c.lease_expires_at, now())::timestamptz AS lease_expires_at,
       coalesce(c.attempted_at, now())::timestamptz AS attempted_at, c.wake,
       coalesce(c.consumed_seq, 0) AS consumed_seq, coalesce(c.claim_inbox_seq, 0) AS claim_inbox_seq,
       coalesce(c.inbox_seq, 0) AS inbox_seq, coalesce(c.pending_children, 0) AS pending_children, c.trace,
       h.url, h.secret, h.previous_secret, h.previous_secret_expires_at, h.timeout_ms,
       h.backoff_base_ms, h.backoff_max_ms,
       h.breaker_state, h.consecutive_failures, h.breaker_next_probe_at, h.paused_at,
       s.others
FROM (SELECT count(*) AS others FROM candidates
      WHERE concurrency_key IS NOT NULL OR rate_limit IS NOT NULL) s
LEFT JOIN claimed c ON true
LEFT JOIN handlers h ON h.name = c.handler
WHERE c.id IS NOT NULL OR s.others > 0;

-- name: JobReadyExists :one
-- Whether queue queue has a runnable job that is due (after an empty pick: throttled by a
-- gate or a rate limit, or all its due rows held by other processes' claims, rather than
-- idle). One descent of jobs_pick per priority, each stopping at its first due entry, as
-- the pick descends. Without the ORDER BY the generic plan of each descent was a
-- sequential scan; written as one EXISTS over the queue, its generic plan was a
-- sequential scan of jobs: 14-16 ms at 120 000 rows for each empty pick, 12.5 µs a step
-- of three server processes' drain (TestReadyProbeStaysOnThePickIndex).
SELECT EXISTS (
    SELECT 1 FROM generate_series(0, 9) AS p(priority)
    CROSS JOIN LATERAL (
        SELECT 1 FROM jobs j
        WHERE j.queue = sqlc.arg(queue)::text
          AND j.status = 'runnable'
          AND j.priority = p.priority::smallint
          AND j.eligible_at <= now()
        ORDER BY j.eligible_at  -- the index's order: a scan of the table would sort all it reads
        LIMIT 1) due);

-- name: JobClaimFair :many
-- Claims up to max_rows runnable jobs of a fair queue (fairness 'round_robin',
-- docs/fairness.md) in one statement: its fairness keys take turns, each by its weight.
-- It runs right after `SELECT … FROM queues … FOR UPDATE` of the queue's row in the same
-- implicit transaction (one round trip, pg.JobClaimFair): the fair claims of a queue are
-- serialised, so this statement's snapshot sees every claim before it, which keeps the
-- keys' caps exact and the round robin's position (queues.fair_cursor, fair_credit) one
-- for every server process.
--
-- The round robin is deficit round robin over the keys with runnable rows, in key order:
--  * ring: the (key, priority) pairs that have runnable rows, from the position on,
--    wrapping around once: one descent of jobs_fair_pick per pair (each finds the pair's
--    earliest row, which says whether the pair has due work). A key with no runnable row
--    has no entry and is never read. The walk stops after the queue's batch pairs (or
--    max_rows, when more): a claim reads O(batch) entries to find its keys however many
--    keys there are, and the next claim goes on from where it stopped. The walk is the
--    queue's batch even when the claim asks for fewer rows (a few freed slots): the
--    keys' shares are counted over the keys it finds, and a short walk would find one
--    key and give it every slot.
--  * Each key's turn is weight x rounds rows, rounds = max_rows / (the weights of the
--    keys found), rounded up; the key the last claim stopped
--    in has the turns it had left (fair_credit). Priorities order the rows within a key;
--    across keys the turns decide (a tenant's priority 0 does not jump the others).
--  * A turn is cut to the key's share of this process's slots for the queue (slots x
--    weight / the weights found, at least 1) less its steps this process runs (own_keys
--    and own_counts: the dispatcher counts them, nothing is read), and to its cap
--    (fairness_keys.max_in_flight) less its steps executing anywhere, which reads at
--    most cap jobs_fair_executing entries. A key whose handler is slow
--    holds its share of the slots, not the slots its finished neighbours leave.
--  * take: one range scan of jobs_fair_pick per key that the batch reaches (the turns
--    before it sum to less than max_rows), in its most urgent pair with due
--    work (queue, key, priority, eligible_at <= now()), LIMIT the key's turn, FOR UPDATE
--    SKIP LOCKED: it reads the rows it takes (and the rows other claims hold), never a
--    row not yet due. A key's less urgent work waits for its next turn.
--  * The rows are claimed in ring order up to max_rows; the key the batch ends in keeps
--    the rest of its turn for the next claim (fair_credit), and the position moves on.
-- Admission is the K=1 probe of a row with a concurrency key (one executing job per key:
-- gates do not apply in a fair queue, the keys' caps take their place) and one row per
-- concurrency key in the batch; fair queues take no rate limits (the insert refuses
-- them). The winners are flipped by primary key as in JobClaimPlain.
WITH RECURSIVE pos AS (
    SELECT q.fair_cursor AS cursor, q.fair_credit AS credit
    FROM queues q WHERE q.name = sqlc.arg(queue)::text
),
ring(key, priority, eligible_at, n, wrapped) AS (
    SELECT s.key, s.priority, s.eligible_at, 1, s.wrapped
    FROM pos CROSS JOIN LATERAL (
        SELECT x.key, x.priority, x.eligible_at, x.wrapped FROM (
            -- each branch one bounded descent (an OR of the two first read the whole
            -- index from the cursor on: 7 600 buffers)
            (SELECT j.fairness_key AS key, j.priority, j.eligible_at, false AS wrapped
             FROM jobs j
             WHERE j.queue = sqlc.arg(queue)::text AND j.status = 'runnable' AND j.fairness_key IS NOT NULL
               AND pos.credit > 0 AND j.fairness_key = pos.cursor
             ORDER BY j.fairness_key, j.priority, j.eligible_at
             LIMIT 1)
            UNION ALL
            (SELECT j.fairness_key AS key, j.priority, j.eligible_at, false AS wrapped
             FROM jobs j
             WHERE j.queue = sqlc.arg(queue)::text AND j.status = 'runnable' AND j.fairness_key IS NOT NULL
               AND j.fairness_key > pos.cursor
             ORDER BY j.fairness_key, j.priority, j.eligible_at
             LIMIT 1)
            UNION ALL
            (SELECT j.fairness_key, j.priority, j.eligible_at, true
             FROM jobs j
             WHERE j.queue = sqlc.arg(queue)::text AND j.status = 'runnable' AND j.fairness_key IS NOT NULL
             ORDER BY j.fairness_key, j.priority, j.eligible_at
             LIMIT 1)
        ) x
        LIMIT 1
    ) s
    UNION ALL
    SELECT s.key, s.priority, s.eligible_at, r.n + 1, s.wrapped
    FROM ring r CROSS JOIN pos CROSS JOIN LATERAL (
        SELECT x.key, x.priority, x.eligible_at, x.wrapped FROM (
            (SELECT j.fairness_key AS key, j.priority, j.eligible_at, r.wrapped AS wrapped
             FROM jobs j
             WHERE j.queue = sqlc.arg(queue)::text AND j.status = 'runnable' AND j.fairness_key IS NOT NULL
               AND (j.fairness_key, j.priority) > (r.key, r.priority)
             ORDER BY j.fairness_key, j.priority, j.eligible_at
             LIMIT 1)
            UNION ALL
            (SELECT j.fairness_key, j.priority, j.eligible_at, true
             FROM jobs j
             WHERE j.queue = sqlc.arg(queue)::text AND j.status = 'runnable' AND j.fairness_key IS NOT NULL
               AND NOT r.wrapped
             ORDER BY j.fairness_key, j.priority, j.eligible_at
             LIMIT 1)
        ) x
        LIMIT 1
    ) s
    WHERE r.n < greatest(sqlc.arg(max_rows)::int, (SELECT q.batch FROM queues q WHERE q.name = sqlc.arg(queue)::text))
      -- back where the walk began: past the position's key, or at it when it began there
      AND NOT (s.wrapped AND pos.cursor IS NOT NULL
               AND (s.key > pos.cursor OR (s.key = pos.cursor AND pos.credit > 0)))
),
-- Each key once, with its most urgent pair that has due work (the pair its turn is
-- taken from) and its settings: one probe of fairness_keys_pkey per key (a LATERAL with
-- LIMIT, which the planner cannot turn into a hash of the queue's keys: it did, 10 000
-- rows read a claim).
found AS (
    SELECT f.key, f.pos, f.due_priority, f.due_priority IS NOT NULL AS due,
           coalesce(k.weight, 1) AS weight, k.max_in_flight AS cap
    FROM (SELECT r.key, min(r.n) AS pos,
                 min(r.priority) FILTER (WHERE r.eligible_at <= now()) AS due_priority
          FROM ring r GROUP BY r.key) f
    LEFT JOIN LATERAL (
        SELECT k.weight, k.max_in_flight FROM fairness_keys k
        WHERE k.queue = sqlc.arg(queue)::text AND k.key = f.key
        LIMIT 1) k ON true
),
-- Rounds enough to fill the batch (the last key's turn is cut and carried over).
sizes AS (
    SELECT greatest(1, ceil(sqlc.arg(max_rows)::int / greatest(sum(f.weight), 1)::numeric))::int AS rounds,
           greatest(sum(f.weight), 1) AS weights
    FROM found f WHERE f.due
),
turns AS (
    SELECT f.key, f.pos, f.due_priority,
           least(CASE WHEN f.pos = 1 AND p.credit > 0 AND f.key = p.cursor THEN p.credit
                      ELSE f.weight * z.rounds END,
                 greatest(1, ceil(sqlc.arg(slots)::int * f.weight / z.weights::numeric))::int
                   - coalesce((SELECT o.n FROM ROWS FROM (unnest(sqlc.arg(own_keys)::text[]), unnest(sqlc.arg(own_counts)::int[])) AS o(key, n)
                               WHERE o.key = f.key LIMIT 1), 0),
                 CASE WHEN f.cap IS NULL THEN 2147483647  -- (never LIMIT NULL: it counts them all)
                      ELSE f.cap - (SELECT count(*) FROM (
                          SELECT 1 FROM jobs e
                          WHERE e.queue = sqlc.arg(queue)::text AND e.fairness_key = f.key
                            AND e.status = 'executing'
                          LIMIT f.cap) anywhere) END) AS turn
    FROM found f CROSS JOIN sizes z CROSS JOIN pos p
    WHERE f.due
),
-- The keys the batch reaches: those whose turns before them sum to less than max_rows.
reached AS (
    SELECT u.key, u.pos, u.due_priority, u.turn
    FROM (SELECT t.key, t.pos, t.due_priority, t.turn,
                 sum(greatest(t.turn, 0)) OVER (ORDER BY t.pos) - greatest(t.turn, 0) AS before
          FROM turns t) u
    WHERE u.turn > 0 AND u.before < sqlc.arg(max_rows)::int
),
taken AS (
    SELECT t.id, t.handler, u.key, u.pos, u.turn, t.concurrency_key,
           row_number() OVER (PARTITION BY u.key ORDER BY t.eligible_at, t.id) AS nth,
           row_number() OVER (PARTITION BY t.concurrency_key ORDER BY u.pos, t.eligible_at, t.id) AS key_rank
    FROM reached u
    CROSS JOIN LATERAL (
        SELECT j.id, j.handler, j.priority, j.eligible_at, j.concurrency_key
        FROM jobs j
        WHERE j.queue = sqlc.arg(queue)::text AND j.status = 'runnable'
          AND j.fairness_key = u.key AND j.priority = u.due_priority
          AND j.eligible_at <= now()
          -- a concurrency key is exclusive here (K=1, the pick's probe; gates do not apply)
          AND (j.concurrency_key IS NULL OR (
                SELECT e.id FROM jobs e
                WHERE e.concurrency_key = j.concurrency_key
                  AND e.status = 'executing' AND e.gate_shard IS NULL
                LIMIT 1) IS NULL)
        ORDER BY j.eligible_at, j.id
        LIMIT u.turn
        FOR UPDATE OF j SKIP LOCKED
    ) t
),
ordered AS (
    SELECT t.id, t.handler, t.key, t.pos, t.turn, t.nth,
           row_number() OVER (ORDER BY t.pos, t.nth) AS rn,
           count(*) OVER (PARTITION BY t.key) AS key_rows
    FROM taken t
    WHERE t.nth <= t.turn AND (t.concurrency_key IS NULL OR t.key_rank = 1)
),
winners AS (
    SELECT o.id FROM ordered o WHERE o.rn <= sqlc.arg(max_rows)::int
),
-- The new position: the key the batch was cut in keeps the rest of its turn; otherwise
-- the last key the batch reached, its turn over (the keys after it have theirs next);
-- when no key could take a row (all at their shares or caps), the walk's last key. An
-- empty walk leaves the position as it was.
moved AS (
    UPDATE queues q
    SET fair_cursor = m.key, fair_credit = m.credit
    FROM (SELECT coalesce(
                   (SELECT o.key FROM ordered o WHERE o.rn = sqlc.arg(max_rows)::int + 1),
                   (SELECT r.key FROM reached r ORDER BY r.pos DESC LIMIT 1),
                   (SELECT r.key FROM ring r ORDER BY r.n DESC LIMIT 1)) AS key,
                 coalesce(
                   (SELECT o.turn - (o.nth - 1) FROM ordered o WHERE o.rn = sqlc.arg(max_rows)::int + 1),
                   0) AS credit) m
    WHERE q.name = sqlc.arg(queue)::text AND m.key IS NOT NULL
),
claimed AS (
    UPDATE jobs j
    SET status = 'executing',
        attempt = j.attempt + 1,
        lease_token = gen_random_uuid(),
        lease_expires_at = now() + sqlc.arg(lease_ttl_ms)::bigint * interval '1 millisecond',
        lease_owner = sqlc.arg(lease_owner)::text,
        attempted_at = now(),
        claim_inbox_seq = least(j.inbox_seq, j.consumed_seq + sqlc.arg(signal_cap)::bigint),
        gate_shard = NULL,
        updated_at = now()
    -- Primary-key lookups of the winners (see JobClaimBatch's claimed).
    WHERE j.id = ANY (ARRAY(SELECT w.id FROM winners w))
    RETURNING j.id, j.queue, j.handler, j.key, j.step, j.attempt, j.max_attempts, j.input,
              j.state, j.created_at, j.lease_token, j.lease_expires_at, j.attempted_at, j.wake,
              j.consumed_seq, j.claim_inbox_seq, j.inbox_seq, j.pending_children, j.gate_shard,
              coalesce(CASE WHEN j.trace_context IS NOT NULL
                   THEN floor(extract(epoch FROM j.eligible_at - '1970-01-01 00:00:00+00'::timestamptz) * 1000000)::bigint::text
                        || ' ' || j.trace_context END,
                       j.trace_context) AS trace,  -- (coalesce: typed nullable text by sqlc)
              j.fairness_key
)
SELECT c.id, c.queue, c.handler, c.key, c.step, c.attempt, c.max_attempts, c.input,
       c.state, c.created_at, c.lease_token::uuid AS lease_token, c.lease_expires_at::timestamptz AS lease_expires_at,
       c.attempted_at::timestamptz AS attempted_at, c.wake,
       c.consumed_seq, c.claim_inbox_seq, c.inbox_seq, c.pending_children, c.gate_shard, c.trace,
       h.url, h.secret, h.previous_secret, h.previous_secret_expires_at, h.timeout_ms,
       h.backoff_base_ms, h.backoff_max_ms,
       h.breaker_state, h.consecutive_failures, h.breaker_next_probe_at, h.paused_at,
       c.fairness_key
FROM claimed c LEFT JOIN handlers h ON h.name = c.handler;

-- name: QueueLockFair :exec
-- Locks a fair queue's row for the JobClaimFair that follows in the same transaction.
SELECT 1 FROM queues WHERE name = sqlc.arg(queue)::text FOR UPDATE;
