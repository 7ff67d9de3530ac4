-- name: RateLimitUpsert :one
-- Creates or changes a rate limit; existing buckets keep their tokens, capped at the new burst.
WITH upserted AS (
    INSERT INTO rate_limits AS r (name, rate, burst) VALUES (sqlc.arg(name)::text, sqlc.arg(rate)::float8, sqlc.arg(burst)::float8)
    ON CONFLICT (name) DO UPDATE SET rate = excluded.rate, burst = excluded.burst, updated_at = excluded.updated_at
    RETURNING r.name, r.rate, r.burst, r.created_at, r.updated_at
),
capped AS (
    UPDATE rate_buckets b SET tokens = least(b.tokens, sqlc.arg(burst)) WHERE b.name = sqlc.arg(name) AND b.tokens > sqlc.arg(burst)
)
SELECT u.name, u.rate, u.burst, u.created_at, u.updated_at FROM upserted u;

-- name: RateLimitList :many
-- Every rate limit (name NULL) or one, with how many buckets (keys) it has.
SELECT r.name, r.rate, r.burst, r.created_at, r.updated_at,
       (SELECT count(*) FROM rate_buckets b WHERE b.name = r.name) AS buckets
FROM rate_limits r
WHERE sqlc.narg(name)::text IS NULL OR r.name = sqlc.narg(name)
ORDER BY r.name;

-- name: RateLimitDelete :one
-- Removes a rate limit and its buckets. Runnable jobs naming it can no longer be granted
-- tokens; they wait until a limit of that name exists again.
DELETE FROM rate_limits WHERE name = sqlc.arg(name) RETURNING name;
