-- 0001: the whole data model of DESIGN §2.
--
-- Statuses are text with a CHECK rather than an enum so that every tool (psql, pgx,
-- the dashboard's SQL-free API) reads them without casts.

CREATE TABLE handlers (
    name                 text PRIMARY KEY,
    url                  text NOT NULL,
    secret               text NOT NULL,
    -- The previous secret stays valid for signing until previous_secret_expires_at
    -- (rotation with an overlap window; both signatures are sent meanwhile).
    previous_secret      text,
    previous_secret_expires_at timestamptz,
    timeout_ms           integer NOT NULL DEFAULT 30000 CHECK (timeout_ms > 0),
    max_attempts         integer NOT NULL DEFAULT 5 CHECK (max_attempts > 0),
    backoff_base_ms      integer NOT NULL DEFAULT 1000 CHECK (backoff_base_ms >= 0),
    backoff_max_ms       integer NOT NULL DEFAULT 3600000 CHECK (backoff_max_ms >= 0),
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE queues (
    name                 text PRIMARY KEY,
    paused               boolean NOT NULL DEFAULT false,
    -- Steps one server process keeps running at once for this queue.
    max_in_flight        integer NOT NULL DEFAULT 100 CHECK (max_in_flight > 0),
    -- Rows one pick claims at most.
    batch                integer NOT NULL DEFAULT 50 CHECK (batch > 0 AND batch <= 1000),
    -- Per-queue override of the GC retention of finished jobs (NULL: server default).
    retention            interval,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE jobs (
    id                   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue                text NOT NULL,
    handler              text NOT NULL,
    status               text NOT NULL DEFAULT 'runnable'
                         CHECK (status IN ('runnable','executing','awaiting','done','failed','cancelled')),
    priority             smallint NOT NULL DEFAULT 5 CHECK (priority BETWEEN 0 AND 9),
    -- runnable: when it may be claimed; awaiting: the wait's deadline ('infinity' = none).
    eligible_at          timestamptz NOT NULL DEFAULT now(),
    input                jsonb NOT NULL DEFAULT '{}',
    state                jsonb,
    result               jsonb,
    error                jsonb,
    step                 integer NOT NULL DEFAULT 0,
    attempt              integer NOT NULL DEFAULT 0,
    max_attempts         integer NOT NULL CHECK (max_attempts > 0),
    key                  text,
    concurrency_key      text,
    rate_limit           text,
    rate_key             text,
    rate_weight          integer NOT NULL DEFAULT 1 CHECK (rate_weight > 0),
    parent_id            bigint REFERENCES jobs (id) ON DELETE SET NULL,
    pending_children     integer NOT NULL DEFAULT 0,
    awaiting             text[],
    -- Why a parked job runs again: 'signal', 'children', 'timeout' (NULL otherwise).
    wake                 text,
    -- Signals delivered so far. Every delivery bumps it under the row lock and stamps the
    -- signal with the new value (signals.seq), so seq order is commit order per job.
    inbox_seq            bigint NOT NULL DEFAULT 0,
    -- Signals with seq <= consumed_seq have been consumed by a completed step.
    consumed_seq         bigint NOT NULL DEFAULT 0,
    -- The inbox watermark the running step was shown (set by the claim). An await whose
    -- row has inbox_seq > claim_inbox_seq when it parks saw a signal arrive late: it is
    -- made runnable instead (the lost-wakeup rule).
    claim_inbox_seq      bigint NOT NULL DEFAULT 0,
    lease_token          uuid,
    lease_expires_at     timestamptz,
    lease_owner          text,
    -- When the current (or last) attempt was claimed.
    attempted_at         timestamptz,
    gate_shard           smallint,
    cancel_requested     boolean NOT NULL DEFAULT false,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    finished_at          timestamptz
) WITH (
    -- A queue table churns: vacuum and analyze it early rather than at 20 % dead rows.
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02,
    fillfactor = 90
);

-- The pick: ordered scan per queue that stops at the batch.
CREATE INDEX jobs_pick ON jobs (queue, priority, eligible_at, id) WHERE status = 'runnable';
-- The reaper and heartbeats: expired leases.
CREATE INDEX jobs_lease ON jobs (lease_expires_at) WHERE status = 'executing';
-- Live-key dedup on insert and signal addressing by key.
CREATE UNIQUE INDEX jobs_live_key ON jobs (key)
    WHERE key IS NOT NULL AND status IN ('runnable','executing','awaiting');
-- The reaper: awaits past their deadline.
CREATE INDEX jobs_await_deadline ON jobs (eligible_at) WHERE status = 'awaiting';
-- Children of a parent (join, enrichment, cancel cascade).
CREATE INDEX jobs_parent ON jobs (parent_id) WHERE parent_id IS NOT NULL;
-- GC: finished jobs by age.
CREATE INDEX jobs_gc ON jobs (finished_at) WHERE status IN ('done','failed','cancelled');
-- K=1 exclusivity of an ungated concurrency key among executing rows; also the probe
-- behind the pick's "key already executing" filter.
CREATE UNIQUE INDEX jobs_concurrency_exclusive ON jobs (concurrency_key)
    WHERE status = 'executing' AND concurrency_key IS NOT NULL AND gate_shard IS NULL;

CREATE TABLE signals (
    id                   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id               bigint NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    -- The job's inbox_seq after this delivery: 1, 2, 3… per job, in commit order.
    seq                  bigint NOT NULL,
    name                 text NOT NULL,
    payload              jsonb,
    created_at           timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX signals_inbox ON signals (job_id, seq);

-- Step history: one row per attempt, written by the outcome statement itself. No foreign
-- key: GC deletes a job's steps in the same statement as the job (cheaper than a trigger).
CREATE TABLE steps (
    job_id               bigint NOT NULL,
    id                   bigint GENERATED ALWAYS AS IDENTITY,
    step                 integer NOT NULL,
    attempt              integer NOT NULL,
    outcome              text NOT NULL,
    http_status          integer,
    started_at           timestamptz NOT NULL,
    finished_at          timestamptz NOT NULL,
    error                jsonb,
    PRIMARY KEY (job_id, id)
);
-- Throughput per queue over time for the dashboard.
CREATE INDEX steps_finished ON steps (finished_at);

CREATE TABLE rate_limits (
    name                 text PRIMARY KEY,
    rate                 double precision NOT NULL CHECK (rate >= 0),
    burst                double precision NOT NULL CHECK (burst >= 1),
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE rate_buckets (
    name                 text NOT NULL REFERENCES rate_limits (name) ON DELETE CASCADE,
    key                  text NOT NULL,
    tokens               double precision NOT NULL CHECK (tokens >= 0),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, key)
);

CREATE TABLE gates (
    key                  text PRIMARY KEY,
    "limit"              integer NOT NULL CHECK ("limit" > 0),
    shards               smallint NOT NULL DEFAULT 1 CHECK (shards BETWEEN 1 AND 64),
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE gate_slots (
    key                  text NOT NULL REFERENCES gates (key) ON DELETE CASCADE,
    shard                smallint NOT NULL,
    available            integer NOT NULL,
    cap                  integer NOT NULL,
    PRIMARY KEY (key, shard),
    CHECK (0 <= available AND available <= cap)
);

-- The status an outcome leads to, decided on the row's latest version by the outcome
-- statement. A done or fail answer is final even when a cancel was requested meanwhile;
-- any other answer to a cancelled job ends it as cancelled.
CREATE FUNCTION gendurable_outcome_status(kind text, attempt integer, max_attempts integer,
                                          cancel_requested boolean, late_signal boolean,
                                          children integer)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN kind = 'done' THEN 'done'
        WHEN kind = 'fail' THEN 'failed'
        WHEN cancel_requested THEN 'cancelled'
        WHEN kind = 'retry' THEN CASE WHEN attempt >= max_attempts THEN 'failed' ELSE 'runnable' END
        WHEN kind = 'next' THEN 'runnable'
        WHEN kind = 'await' THEN CASE WHEN late_signal THEN 'runnable' ELSE 'awaiting' END
        WHEN kind = 'spawn' THEN CASE WHEN children = 0 THEN 'runnable' ELSE 'awaiting' END
    END
$$;

-- Exponential backoff with jitter for the attempt that just failed: base · 2^(attempt-1),
-- capped at max, then a uniform draw in [½, 1] of that (so retries of a burst spread out).
CREATE FUNCTION gendurable_backoff_ms(attempt integer, base_ms integer, max_ms integer)
RETURNS bigint LANGUAGE sql VOLATILE AS $$
    SELECT (least(max_ms::float8, base_ms * power(2::float8, least(greatest(attempt - 1, 0), 40)))
            * (0.5 + random() / 2))::bigint
$$;
