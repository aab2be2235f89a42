"""How long the run history is kept and where (docs/retention.md): pruning, time
partitions on PostgreSQL, and the named leases that let one process at a time finish them."""
