-- name: HandlerUpsert
-- Registers or updates a handler; $3 NULL keeps the existing secret (a new handler
-- gets the caller's generated one in $4). Index use: handlers_pkey.
INSERT INTO handlers AS h (name, url, secret, timeout_ms, max_attempts, backoff_base_ms, backoff_max_ms)
VALUES ($1, $2, coalesce($3, $4), coalesce($5, 30000), coalesce($6, 5), coalesce($7, 1000), coalesce($8, 3600000))
ON CONFLICT (name) DO UPDATE
SET url = excluded.url,
    secret = coalesce($3, h.secret),
    timeout_ms = coalesce($5, h.timeout_ms),
    max_attempts = coalesce($6, h.max_attempts),
    backoff_base_ms = coalesce($7, h.backoff_base_ms),
    backoff_max_ms = coalesce($8, h.backoff_max_ms),
    updated_at = now()
RETURNING h.name, h.url, h.secret, h.previous_secret_expires_at, h.timeout_ms, h.max_attempts,
          h.backoff_base_ms, h.backoff_max_ms, h.created_at, h.updated_at;

-- name: HandlerGet
SELECT h.name, h.url, h.secret, h.previous_secret_expires_at, h.timeout_ms, h.max_attempts,
       h.backoff_base_ms, h.backoff_max_ms, h.created_at, h.updated_at
FROM handlers h WHERE h.name = $1;

-- name: HandlerList
SELECT h.name, h.url, h.secret, h.previous_secret_expires_at, h.timeout_ms, h.max_attempts,
       h.backoff_base_ms, h.backoff_max_ms, h.created_at, h.updated_at
FROM handlers h ORDER BY h.name;

-- name: HandlerDelete
DELETE FROM handlers WHERE name = $1 RETURNING name;

-- name: HandlerRotateSecret
-- Makes $2 the handler's secret and keeps the current one valid for signing for $3 ms
-- (both signatures are sent meanwhile).
UPDATE handlers h
SET previous_secret = h.secret,
    previous_secret_expires_at = now() + $3 * interval '1 millisecond',
    secret = $2,
    updated_at = now()
WHERE h.name = $1
RETURNING h.name, h.url, h.secret, h.previous_secret_expires_at, h.timeout_ms, h.max_attempts,
          h.backoff_base_ms, h.backoff_max_ms, h.created_at, h.updated_at;
