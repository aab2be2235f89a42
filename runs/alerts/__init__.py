"""Owner alerts: the dead letter, misfire skips and late starts told to the run's owner by
email and by a signed webhook, with a bounded digest for bursts (docs/alerts.md)."""
