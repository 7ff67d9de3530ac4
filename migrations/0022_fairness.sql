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
--  * jobs_fair_executing (queue, fairness_key, lease_owner), executing rows: a key's
--    steps in flight, counted up to its cap (the per-key max_in_flight) and up to its
--    share of the claiming process's slots.
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
CREATE INDEX jobs_fair_executing ON jobs (queue, fairness_key, lease_owner)
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
