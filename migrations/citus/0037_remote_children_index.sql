-- citus/0037: the remote children whose end has not reached their parent, or who live again
-- after it did (citus/0036): what the reaper's turn sweeps. A statement of its own, since
-- Citus refuses a CREATE INDEX on a distributed table in a query string of several commands.
CREATE INDEX jobs_parent_joins ON jobs (placement)
    WHERE parent_join = 'relive' OR (parent_join = 'pending' AND status IN ('done', 'failed', 'cancelled'));
