-- name: RateBucketMint :exec
-- Mints the buckets that a batch's rate-limited jobs draw from, each at its placement
-- (the jobs' own: RateBucketPlacement), full: updated_at '-infinity' is read by the claim
-- as a bucket holding its burst. A bucket that exists keeps its tokens. The arrays are
-- evaluated on the coordinator, which routes each row to its shard.
INSERT INTO rate_buckets (name, key, placement, tokens, updated_at)
SELECT b.name, b.key, b.placement, 0, '-infinity'
FROM ROWS FROM (unnest(sqlc.arg(names)::text[]), unnest(sqlc.arg(keys)::text[]), unnest(sqlc.arg(placements)::int[]))
     AS b(name, key, placement)
ON CONFLICT (name, key, placement) DO NOTHING;

-- name: RateLimitPut :exec
-- RateLimitUpsert (sql/rate_limits.sql) on Citus, the first of three statements in one
-- transaction: the limit (a reference table, written on every node).
INSERT INTO rate_limits AS r (name, rate, burst) VALUES (sqlc.arg(name)::text, sqlc.arg(rate)::float8, sqlc.arg(burst)::float8)
ON CONFLICT (name) DO UPDATE SET rate = excluded.rate, burst = excluded.burst, updated_at = excluded.updated_at;

-- name: RateBucketsCap :exec
-- The second: the limit's buckets keep their tokens, capped at the new burst (every
-- shard at once; a PUT, not a step).
UPDATE rate_buckets b SET tokens = sqlc.arg(burst)::float8
WHERE b.name = sqlc.arg(name)::text AND b.tokens > sqlc.arg(burst)::float8;

-- name: RateBucketsRemint :exec
-- The third: the buckets of the limit's live jobs, minted again where missing (a limit
-- deleted, which deleted its buckets, then put back): each shard inserts its own jobs'
-- buckets (colocated by placement, pushed down to every shard at once).
INSERT INTO rate_buckets (name, key, placement, tokens, updated_at)
SELECT DISTINCT j.rate_limit, coalesce(j.rate_key, ''), j.placement, 0::float8, '-infinity'::timestamptz
FROM jobs j
WHERE j.rate_limit = sqlc.arg(name)::text AND j.status IN ('runnable', 'executing', 'awaiting')
ON CONFLICT (name, key, placement) DO NOTHING;

-- name: RateLimitList :many
-- RateLimitList (sql/rate_limits.sql) on Citus, without the bucket counts (a count on
-- every shard: RateBucketCounts).
SELECT r.name, r.rate, r.burst, r.created_at, r.updated_at
FROM rate_limits r
WHERE sqlc.narg(name)::text IS NULL OR r.name = sqlc.narg(name)
ORDER BY r.name;

-- name: RateBucketCounts :many
-- How many buckets each rate limit has, counted on every shard at once.
SELECT b.name, count(*) AS buckets
FROM rate_buckets b
WHERE sqlc.narg(name)::text IS NULL OR b.name = sqlc.narg(name)
GROUP BY b.name;
