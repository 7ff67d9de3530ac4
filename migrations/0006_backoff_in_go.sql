-- The retry backoff is policy and lives in Go now (engine.RetryDelay): the outcome
-- statement and the reaper take each row's delay as an argument, so the SQL function
-- that computed it goes. A process of an earlier build still calls it in its retry
-- outcomes and reaper sweeps: upgrade every process sharing the database together.
DROP FUNCTION gendurable_backoff_ms(integer, integer, integer);
