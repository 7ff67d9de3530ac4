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
  AND j.rate_placement IS NULL  -- a remote bucket is minted when a take finds it missing
ON CONFLICT (name, key, placement) DO NOTHING;

-- name: RateWaitsWake :many
-- The fourth: the steps that a remote bucket of the limit gave back (LeaseReleaseMany with
-- a delay; migrations/citus/0034), runnable now, so that a rate or burst raised is used at
-- once and a limit put back is waited on no longer. A step still runnable at exactly the
-- run time it was given back with waits on its bucket; one whose run time something set
-- since (a retry's backoff) or that a run_at delays is left alone. Every shard at once,
-- through jobs_rate_waits; the caller wakes the queues answered.
UPDATE jobs j
SET eligible_at = now(), updated_at = now()
WHERE j.rate_waited_until IS NOT NULL
  AND j.status = 'runnable'
  AND j.eligible_at = j.rate_waited_until
  AND j.eligible_at > now()
  AND (j.rate_limit = sqlc.arg(name)::text
       OR j.extra_rate_limits @> jsonb_build_array(jsonb_build_object('name', sqlc.arg(name)::text)))
RETURNING j.queue, j.placement;

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

-- name: RateBucketTake :one
-- A remote bucket's debit (citusTakeRemoteBuckets; migrations/citus/0031): the steps that
-- claims on other shards leased, whose bucket lives here, in pick order with their weights,
-- admitted while their summed weights fit the bucket's tokens (refilled from the clock; a
-- step heavier than the bucket holds is passed over and weighs nothing), as the claim
-- admits the rows of a bucket on its own shard, and the winners' weights debited. One
-- router statement on the bucket's shard, the bucket locked while it is read (a take or a
-- claim that debited it meanwhile is waited for and read after). No row when the bucket is
-- missing (never minted here, or its limit deleted).
-- Index use: rate_buckets_pkey, rate_limits_pkey.
WITH locked AS (
    SELECT b.name, b.tokens, b.updated_at
    FROM rate_buckets b
    WHERE b.placement = sqlc.arg(placement)::int AND b.name = sqlc.arg(name)::text AND b.key = sqlc.arg(key)::text
    FOR UPDATE OF b
),
-- (each CTE read once, and the lock taken without a join, as in JobClaim: else Citus plans
-- the CTEs as subplans, each a round trip of its own)
fits AS (
    SELECT w.ord, w.weight, h.tokens, h.rate, h.burst,
           w.weight <= h.tokens
             AND sum(CASE WHEN w.weight <= h.tokens THEN w.weight ELSE 0 END) OVER (ORDER BY w.ord) <= h.tokens AS fits
    FROM (SELECT CASE WHEN l.updated_at = '-infinity' THEN r.burst
                      ELSE least(r.burst, l.tokens + r.rate * greatest(extract(epoch FROM now() - l.updated_at), 0)) END AS tokens,
                 r.rate, r.burst
          FROM locked l JOIN rate_limits r ON r.name = l.name) h
    CROSS JOIN unnest(sqlc.arg(weights)::int[]) WITH ORDINALITY AS w(weight, ord)
),
taken AS (
    SELECT min(f.tokens) - coalesce(sum(f.weight) FILTER (WHERE f.fits), 0) AS tokens, min(f.rate) AS rate,
           min(f.burst) AS burst, array_agg(f.fits ORDER BY f.ord) AS fits
    FROM fits f
)
UPDATE rate_buckets b
SET tokens = t.tokens, updated_at = now()
FROM taken t
WHERE b.placement = sqlc.arg(placement)::int AND b.name = sqlc.arg(name)::text AND b.key = sqlc.arg(key)::text
  AND t.fits IS NOT NULL
RETURNING t.fits::bool[] AS fits, t.tokens::float8 AS tokens, t.rate::float8 AS rate, t.burst::float8 AS burst;

-- name: RateBucketRefund :exec
-- Gives back to a bucket the tokens RateBucketTake debited for steps that another bucket
-- of theirs could not pay for (a job naming several limits runs only when all of them
-- pay: citusTakeRemoteBuckets), never past the burst. The refill clock is left as the
-- debit set it. One router statement on the bucket's shard.
UPDATE rate_buckets b
SET tokens = least(r.burst, b.tokens + sqlc.arg(tokens)::float8)
FROM rate_limits r
WHERE b.placement = sqlc.arg(placement)::int AND b.name = sqlc.arg(name)::text AND b.key = sqlc.arg(key)::text
  AND r.name = b.name;
