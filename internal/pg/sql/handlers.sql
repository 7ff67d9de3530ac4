-- name: HandlerUpsert :one
-- Registers or updates a handler; a NULL secret keeps the existing one (a new handler
-- gets the generated new_secret of the caller). NULL settings keep the current value or take
-- the default. Index use: handlers_pkey.
--
-- The breaker settings (NULL: keep, or the default) follow the same rule; turning the
-- breaker off (threshold 0) also closes it and lifts a pause it caused.
INSERT INTO handlers AS h (name, url, secret, timeout_ms, max_attempts, backoff_base_ms, backoff_max_ms,
                           breaker_threshold, breaker_probe_ms, breaker_probe_max_ms, breaker_pause_after_ms)
VALUES (sqlc.arg(name), sqlc.arg(url), coalesce(sqlc.narg(secret)::text, sqlc.arg(new_secret)::text),
        coalesce(sqlc.narg(timeout_ms)::int, 30000), coalesce(sqlc.narg(max_attempts)::int, 5),
        coalesce(sqlc.narg(backoff_base_ms)::int, 1000), coalesce(sqlc.narg(backoff_max_ms)::int, 3600000),
        coalesce(sqlc.narg(breaker_threshold)::int, 10), coalesce(sqlc.narg(breaker_probe_ms)::int, 5000),
        coalesce(sqlc.narg(breaker_probe_max_ms)::int, 300000),
        coalesce(sqlc.narg(breaker_pause_after_ms)::bigint, 3600000))
ON CONFLICT (name) DO UPDATE
SET url = excluded.url,
    secret = coalesce(sqlc.narg(secret)::text, h.secret),
    timeout_ms = coalesce(sqlc.narg(timeout_ms)::int, h.timeout_ms),
    max_attempts = coalesce(sqlc.narg(max_attempts)::int, h.max_attempts),
    backoff_base_ms = coalesce(sqlc.narg(backoff_base_ms)::int, h.backoff_base_ms),
    backoff_max_ms = coalesce(sqlc.narg(backoff_max_ms)::int, h.backoff_max_ms),
    breaker_threshold = coalesce(sqlc.narg(breaker_threshold)::int, h.breaker_threshold),
    breaker_probe_ms = coalesce(sqlc.narg(breaker_probe_ms)::int, h.breaker_probe_ms),
    breaker_probe_max_ms = coalesce(sqlc.narg(breaker_probe_max_ms)::int, h.breaker_probe_max_ms),
    breaker_pause_after_ms = coalesce(sqlc.narg(breaker_pause_after_ms)::bigint, h.breaker_pause_after_ms),
    breaker_state = CASE WHEN sqlc.narg(breaker_threshold)::int = 0 THEN 'closed' ELSE h.breaker_state END,
    consecutive_failures = CASE WHEN sqlc.narg(breaker_threshold)::int = 0 THEN 0 ELSE h.consecutive_failures END,
    paused_at = CASE WHEN sqlc.narg(breaker_threshold)::int = 0 THEN NULL ELSE h.paused_at END,
    paused_reason = CASE WHEN sqlc.narg(breaker_threshold)::int = 0 THEN NULL ELSE h.paused_reason END,
    updated_at = excluded.updated_at  -- the proposed row's now(): Citus refuses a function in DO UPDATE SET
RETURNING h.*;

-- name: HandlerGet :one
SELECT h.* FROM handlers h WHERE h.name = sqlc.arg(name);

-- name: HandlerList :many
SELECT h.* FROM handlers h ORDER BY h.name;

-- name: HandlerDelete :one
DELETE FROM handlers WHERE name = sqlc.arg(name) RETURNING name;

-- name: HandlerRotateSecret :one
-- Makes secret the secret of the handler and keeps the current one valid for signing for
-- overlap_ms (both signatures are sent meanwhile).
UPDATE handlers h
SET previous_secret = h.secret,
    previous_secret_expires_at = now() + sqlc.arg(overlap_ms)::bigint * interval '1 millisecond',
    secret = sqlc.arg(secret),
    updated_at = now()
WHERE h.name = sqlc.arg(name)
RETURNING h.*;
