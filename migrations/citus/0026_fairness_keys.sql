-- Fair share is not built on Citus yet (docs/fairness.md): the API refuses a fair queue
-- there. The key settings are a small table every node may read: a reference table.
SELECT create_reference_table('fairness_keys');
