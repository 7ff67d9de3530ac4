-- citus/0035: the steps a remote bucket gave back, which a PUT of their rate limit wakes
-- (citus/0034, RateWaitsWake): a statement of its own, since Citus refuses a CREATE INDEX on
-- a distributed table in a query string of several commands.
CREATE INDEX jobs_rate_waits ON jobs (rate_waited_until) WHERE rate_waited_until IS NOT NULL;
