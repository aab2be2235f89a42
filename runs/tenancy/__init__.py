"""Per-owner bounds and the isolation policy (docs/isolation.md): quotas, priority
classes and queue limits from settings, and the owner limits the brokers enforce."""
