-- citus/0034: a PUT of a rate limit wakes the steps its remote buckets gave back
-- (docs/citus.md, "Remote buckets"). A step whose bucket lives on another shard is leased by
-- its own shard's claim, and given back, runnable at the time its tokens will be there,
-- when the bucket cannot pay for it (LeaseReleaseMany with a delay). Nothing told such a
-- step from one delayed by its run_at or a retry's backoff, so a PUT that raised the
-- rate left it waiting for the time the old rate gave (at rate 0, a recheck every 10 s).
--
-- rate_waited_until is the run time it was given back with. A step still runnable at
-- exactly that time waits on its bucket (a retry or anything else that sets its run time
-- afterwards leaves the two apart), and a PUT of one of its limits makes it runnable now
-- (RateWaitsWake). The mark is left on a step once it runs; the partial index holds the
-- steps ever given back, until GC deletes them (citus/0035: Citus refuses a CREATE INDEX
-- on a distributed table in a query string of several commands).
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';

ALTER TABLE jobs ADD COLUMN rate_waited_until timestamptz;
