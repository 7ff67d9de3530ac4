-- name: APIKeyInsert
INSERT INTO api_keys (name, prefix, hash, scope) VALUES ($1, $2, $3, $4)
RETURNING id, name, prefix, scope, created_at, last_used_at, revoked_at;

-- name: APIKeyList
SELECT id, name, prefix, scope, created_at, last_used_at, revoked_at FROM api_keys ORDER BY id;

-- name: APIKeyRevoke
UPDATE api_keys SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL RETURNING id;

-- name: APIKeyAuthenticate
-- The scope of the live key with hash $1, marking it used (at most once a minute, so a
-- busy key does not write on every request). Index use: api_keys_hash_key.
WITH k AS (
    SELECT id, scope, last_used_at FROM api_keys WHERE hash = $1 AND revoked_at IS NULL
),
touched AS (
    UPDATE api_keys a SET last_used_at = now()
    FROM k WHERE a.id = k.id AND (k.last_used_at IS NULL OR k.last_used_at < now() - interval '1 minute')
)
SELECT id, scope FROM k;
