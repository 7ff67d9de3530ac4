-- 0016: the charts (GET /v1/stats/steps) read per-second rollups instead of the history,
-- and the history loses its two secondary indexes.
--
-- steps_queue_finished and steps_handler_finished cost every step two B-tree inserts for
-- a read the dashboard makes a few times a minute (measured in make bench: 156 WAL bytes
-- and ~9 µs of PostgreSQL CPU a step, 1 304 → 1 148 bytes and 62 → 53 µs). Each server
-- process now counts the attempts it writes to the history, by queue, handler and second,
-- and appends what it counted once a second (engine.StepRollups): one row per queue,
-- handler and second per process, whatever the step rate. A chart sums the rows of its
-- window (a range scan of step_rollups_queue or step_rollups_handler).
--
-- Latency is a histogram: 8 buckets per doubling of microseconds (latency_buckets holds
-- the bucket numbers present, latency_counts their attempts), so a percentile is read to
-- within 4.5 % (engine.LatencyBucket). A process killed with kill -9 loses the counts of
-- its last second; the history itself is exact.
CREATE TABLE step_rollups (
    at              timestamptz NOT NULL,  -- the second the attempts finished in
    queue           text NOT NULL,
    handler         text,                  -- NULL for history rows older than migration 0015
    ok              integer NOT NULL,      -- next, await, spawn, done
    failed          integer NOT NULL,      -- fail, request_too_large, bad_secret
    done            integer NOT NULL,      -- done (a part of ok)
    total           integer NOT NULL,      -- every attempt (total - ok - failed were retried)
    latency_buckets smallint[] NOT NULL,
    latency_counts  integer[] NOT NULL,
    CHECK (cardinality(latency_buckets) = cardinality(latency_counts))
);
CREATE INDEX step_rollups_queue ON step_rollups (queue, at);
CREATE INDEX step_rollups_handler ON step_rollups (handler, at);
-- Retention (older than the 24 h a chart can ask for): rows arrive in time order.
CREATE INDEX step_rollups_at ON step_rollups USING brin (at);

-- The charts of the last day stay whole: the history of the last 25 hours is rolled up
-- here once (a range scan of steps_queue_finished, before it goes).
INSERT INTO step_rollups (at, queue, handler, ok, failed, done, total, latency_buckets, latency_counts)
SELECT l.at, l.queue, l.handler, sum(l.ok)::int, sum(l.failed)::int, sum(l.done)::int, sum(l.n)::int,
       array_agg(l.bucket ORDER BY l.bucket), array_agg(l.n::int ORDER BY l.bucket)
FROM (SELECT date_trunc('second', s.finished_at) AS at, s.queue, s.handler,
             CASE WHEN us < 1 THEN 0 ELSE floor(ln(us) / ln(2) * 8)::int + 1 END::smallint AS bucket,
             count(*) FILTER (WHERE s.outcome IN ('next', 'await', 'spawn', 'done')) AS ok,
             count(*) FILTER (WHERE s.outcome IN ('fail', 'request_too_large', 'bad_secret')) AS failed,
             count(*) FILTER (WHERE s.outcome = 'done') AS done,
             count(*) AS n
      FROM steps s
      CROSS JOIN LATERAL (SELECT extract(epoch FROM s.finished_at - s.started_at)::float8 * 1e6 AS us) d
      WHERE s.queue IS NOT NULL AND s.finished_at >= now() - interval '25 hours'
      GROUP BY 1, 2, 3, 4) l
GROUP BY l.at, l.queue, l.handler;

DROP INDEX steps_queue_finished;
DROP INDEX steps_handler_finished;
