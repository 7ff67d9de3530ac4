-- name: APIKeyInsert :one
-- Stores a new key by its hash (the key itself is never stored).
INSERT INTO api_keys (name, prefix, hash, scope) VALUES (sqlc.arg(name), sqlc.arg(prefix), sqlc.arg(hash), sqlc.arg(scope))
RETURNING id, name, prefix, scope, created_at, last_used_at, revoked_at;

-- name: APIKeyList :many
-- Every key, revoked ones included (api_keys_pkey order).
SELECT id, name, prefix, scope, created_at, last_used_at, revoked_at FROM api_keys ORDER BY id;

-- name: APIKeyRevoke :one
UPDATE api_keys SET revoked_at = now() WHERE id = sqlc.arg(id) AND revoked_at IS NULL RETURNING id;

-- name: APIKeyAuthenticate :one
-- The scope of the live key with this hash, marking it used (at most once a minute, so a
-- busy key does not write on every request). Index use: api_keys_hash_key.
WITH k AS (
    SELECT a.id, a.scope, a.last_used_at FROM api_keys a WHERE a.hash = sqlc.arg(hash) AND a.revoked_at IS NULL
),
touched AS (
    UPDATE api_keys a SET last_used_at = now()
    FROM k WHERE a.id = k.id AND (k.last_used_at IS NULL OR k.last_used_at < now() - interval '1 minute')
)
SELECT k.id, k.scope FROM k;
