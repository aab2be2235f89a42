"""The REST API (docs/api.md): the views of jobs, runs, limits, alerts and backfills,
their serializers and filters, and what every request goes through (permissions,
throttling, parsing, tokens, idempotency, JSON errors)."""
