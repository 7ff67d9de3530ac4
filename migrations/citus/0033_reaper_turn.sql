-- citus/0033: one reaper sweeps at a time (docs/citus.md, "Faults and growth"). On Citus a
-- reaper's sweep starts with two fan-out probes (an expired lease or a due await on any
-- shard?), one task per shard each; every server process swept every second, so N servers
-- sent 2N fan-outs a second to an idle cluster. reaper_turn, a table of the coordinator
-- (not distributed: only the coordinator reads it), names the process whose turn it is:
-- it sweeps and renews the turn at each sweep; the others pass their sweeps (one local
-- statement each) until its turn lapses, when the next that asks takes it.
CREATE TABLE reaper_turn (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    owner     text NOT NULL,
    until     timestamptz NOT NULL
);
