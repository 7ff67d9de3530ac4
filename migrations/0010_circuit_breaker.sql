-- 0010: a circuit breaker per handler (docs/flow-control.md, "Circuit breaker").
--
-- The breaker's settings and state live on the handler's row, so every server process
-- sees the same breaker: a process records the failures of its outcome batches here, the
-- claim statement returns the state with each claimed step (its handlers join already
-- reads the row), and the single probe of an open breaker is won by a conditional UPDATE
-- of this row. A handler that never fails is never written.
ALTER TABLE handlers
    -- Consecutive breaker failures (connection errors, timeouts, 5xx) that open the
    -- breaker; 0 turns the breaker off.
    ADD COLUMN breaker_threshold integer NOT NULL DEFAULT 10 CHECK (breaker_threshold >= 0),
    -- The first probe interval; each failed probe doubles it, up to breaker_probe_max_ms.
    ADD COLUMN breaker_probe_ms integer NOT NULL DEFAULT 5000 CHECK (breaker_probe_ms > 0),
    ADD COLUMN breaker_probe_max_ms integer NOT NULL DEFAULT 300000 CHECK (breaker_probe_max_ms > 0),
    -- A breaker open for longer than this pauses the handler (0: never).
    ADD COLUMN breaker_pause_after_ms bigint NOT NULL DEFAULT 3600000 CHECK (breaker_pause_after_ms >= 0),
    ADD COLUMN breaker_state text NOT NULL DEFAULT 'closed'
        CHECK (breaker_state IN ('closed', 'open', 'half_open')),
    ADD COLUMN consecutive_failures integer NOT NULL DEFAULT 0,
    ADD COLUMN breaker_opened_at timestamptz,
    -- open: when the next probe may be sent; half_open: when the running probe is given
    -- up for lost (its process died) and another may be sent.
    ADD COLUMN breaker_next_probe_at timestamptz,
    -- Failed probes since the breaker opened (the interval is probe_ms × 2^probes).
    ADD COLUMN breaker_probes integer NOT NULL DEFAULT 0,
    -- Times the breaker opened, ever (the API shows it; the metric counts per process).
    ADD COLUMN breaker_opens bigint NOT NULL DEFAULT 0,
    -- Set when the breaker paused the handler: its steps are not called until an
    -- operator resumes it (POST /v1/handlers/{name}/resume, or a PUT).
    ADD COLUMN paused_at timestamptz,
    ADD COLUMN paused_reason text,
    ADD CONSTRAINT handlers_breaker_open_has_times CHECK (
        breaker_state = 'closed' OR (breaker_opened_at IS NOT NULL AND breaker_next_probe_at IS NOT NULL));

-- A step parked by an open breaker is runnable with lease_owner 'breaker:<handler>' (the
-- breaker holds it; every claim overwrites lease_owner and every outcome clears it, so
-- no other runnable row has one). When the breaker closes, JobWakeParked finds the
-- handler's parked steps through this index, which holds nothing else: a healthy step
-- never enters it.
CREATE INDEX jobs_breaker_parked ON jobs (lease_owner) WHERE status = 'runnable' AND lease_owner IS NOT NULL;
