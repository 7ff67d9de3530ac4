-- 0022: fair share across the keys of a queue (docs/fairness.md).
--
-- jobs.fairness_key names the tenant (or any other party) a job's work counts for. It is
-- NULL for most jobs; in a queue whose fairness is 'round_robin' every live job has one
-- (an insert or a spawn without one stores '', the default key, and turning fairness on
-- fills it in for the queue's live jobs), so the fair claim reads only jobs_fair_pick.
--
-- The two partial indexes hold keyed rows only: a queue without fairness keys pays
-- nothing for them (a predicate test on each row version), and the plain step path keeps
-- its plans and its costs.
--  * jobs_fair_pick (queue, fairness_key, priority, eligible_at, id), runnable rows: the
--    claim walks the queue's keys that have runnable work in key order (one descent per
--    (key, priority) pair, never an idle key: it has no entry), then takes each key's
--    share by one range scan per pair that stops at its first row not yet due.
--  * jobs_fair_executing (queue, fairness_key), executing rows: a key's steps in flight,
--    counted up to its cap (the per-key max_in_flight) by the claim, and by the API.
ALTER TABLE jobs ADD COLUMN fairness_key text;

ALTER TABLE queues
    ADD COLUMN fairness text NOT NULL DEFAULT 'none' CHECK (fairness IN ('none', 'round_robin')),
    -- The round robin's position, shared by every process (the fair claim locks the queue
    -- row first, so that its claims are serialised and this stays exact): the key the
    -- last claim stopped in, and the turns it has left there (0: its turn is over).
    ADD COLUMN fair_cursor text,
    ADD COLUMN fair_credit integer NOT NULL DEFAULT 0;

CREATE INDEX jobs_fair_pick ON jobs (queue, fairness_key, priority, eligible_at, id)
    WHERE status = 'runnable' AND fairness_key IS NOT NULL;
CREATE INDEX jobs_fair_executing ON jobs (queue, fairness_key)
    WHERE status = 'executing' AND fairness_key IS NOT NULL;

-- A key's settings in a fair queue: its weight (its turns in each round, default 1) and
-- its cap (at most max_in_flight of its steps executing at once; NULL: none). A key
-- without a row has weight 1 and no cap: keys need not be declared.
CREATE TABLE fairness_keys (
    queue         text NOT NULL,
    key           text NOT NULL,
    weight        integer NOT NULL DEFAULT 1 CHECK (weight BETWEEN 1 AND 1000),
    max_in_flight integer CHECK (max_in_flight > 0),
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, key)
);

-- gendurable_enqueue takes a fairness_key option: the function of 0018 (or its Citus
-- step) does the rest, unchanged, under a new name. A job in a fair queue gets the key
-- '' when it names none, and a fair queue refuses rate limits, as the REST insert does.
-- The key is set by a second write of the new row, only for a job that has one (a fair
-- queue's job, or one that names a key); a key that deduplicated to a live job gives
-- that job the key only if it had none. Not on Citus yet.
ALTER FUNCTION gendurable_enqueue(text, jsonb, jsonb) RENAME TO gendurable_enqueue_without_fairness;

CREATE OR REPLACE FUNCTION gendurable_enqueue(handler text, input jsonb DEFAULT '{}', options jsonb DEFAULT '{}')
RETURNS bigint LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
DECLARE
    opts jsonb := coalesce(options, '{}'::jsonb);
    job_fairness_key text;
    fair boolean;
    job_id bigint;
BEGIN
    IF jsonb_typeof(opts) = 'object' AND opts ? 'fairness_key' THEN
        job_fairness_key := gendurable_enqueue_text(opts, 'fairness_key', 'fairness_key');
        IF octet_length(job_fairness_key) > 512 THEN
            PERFORM gendurable_enqueue_refuse('fairness_key', 'must be at most 512 bytes');
        END IF;
        IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
            PERFORM gendurable_enqueue_refuse('fairness_key', 'fair share is not offered on Citus yet (docs/fairness.md)');
        END IF;
        opts := opts - 'fairness_key';
    END IF;
    fair := jsonb_typeof(opts) = 'object' AND EXISTS (
        SELECT 1 FROM queues q
        WHERE q.name = coalesce(opts ->> 'queue', 'default') AND q.fairness <> 'none');
    IF fair AND (opts ? 'rate_limit' OR opts ? 'rate_limits') THEN
        PERFORM gendurable_enqueue_refuse(CASE WHEN opts ? 'rate_limit' THEN 'rate_limit' ELSE 'rate_limits' END,
            format('queue %s is fair (fairness round_robin): its claims apply no rate limit; cap the fairness key instead',
                   to_json(opts ->> 'queue')));
    END IF;
    job_id := gendurable_enqueue_without_fairness(handler, input, opts);
    IF job_fairness_key IS NOT NULL OR fair THEN
        UPDATE jobs SET fairness_key = coalesce(job_fairness_key, '')
        WHERE id = job_id AND fairness_key IS NULL;
    END IF;
    RETURN job_id;
END
$$;

COMMENT ON FUNCTION gendurable_enqueue(text, jsonb, jsonb) IS
    'Insert a gendurable job from the calling transaction (it exists iff that transaction commits); see docs/sql-enqueue.md';
