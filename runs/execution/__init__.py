"""A run's life after a worker leases it (docs/architecture.md, "Run states and
transitions"): the lease (leases), the fenced transitions, the ack (completion),
continuations, the hooks apps above follow, what happens after an outcome, retry
strategies and expiry."""
