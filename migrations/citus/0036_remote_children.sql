-- citus/0036: a child away from its parent (docs/citus.md, "A child away from its parent").
-- A spawned child lives at its parent's placement (a family on one shard), unless its own
-- concurrency key or fairness key places it elsewhere: K=1 and a key's cap are exact only
-- where every job of the key lives. Such a *remote* child lives at its key's placement,
-- and its parent keeps a stub of it: a remote_children row at the parent's placement,
-- which the family's statements there read as they read a local child (the join's
-- children, the counts, the live-children checks of a retry or replay) and which carries
-- the child's end once it is joined.
--
-- jobs.parent_join, on a remote child only: 'pending' until its end reaches its parent,
-- 'joined' after, 'relive' when a joined child is retried or replayed (its parent counts
-- it again). The reaper's turn sweeps the two (RemoteChildTurnsTake, then RemoteChildrenEnd
-- or RemoteChildrenRelive at the parent's placement), each child and its parent in one
-- transaction: a child's end is joined exactly once. remote_children.cancel_requested: a
-- cancel of the parent's family reached the stub; the same sweep cancels the child where it
-- lives (JobCancel there, which cascades to its own family).
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';

ALTER TABLE jobs ADD COLUMN parent_join text;

CREATE TABLE remote_children (
    placement        integer NOT NULL, -- the parent's
    parent_id        bigint NOT NULL,
    child_id         bigint NOT NULL,
    handler          text NOT NULL,
    key              text,
    status           text NOT NULL DEFAULT 'runnable', -- 'runnable' while live, then the child's end
    result           jsonb,
    error            jsonb,
    cancel_requested boolean NOT NULL DEFAULT false,
    PRIMARY KEY (parent_id, child_id, placement)
);
-- The stubs a cancel reached whose child is still live: the reaper's turn cancels them.
CREATE INDEX remote_children_cancels ON remote_children (placement) WHERE cancel_requested;
SELECT create_distributed_table('remote_children', 'placement', colocate_with => 'jobs');
