"""What the daemons share and the dispatcher itself (docs/architecture.md,
"Daemons"): lifecycle and signals, fault isolation, partition and shard ownership by
lease, and the counters they flush."""
