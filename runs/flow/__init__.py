"""Flow control by handler and by key (docs/isolation.md, "Rate limits" and
"Concurrency keys"): the limits in force, setting them at run time, and their tables."""
