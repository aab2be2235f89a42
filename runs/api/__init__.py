"""The runs REST API's parts that belong to runs (docs/api.md): serializers, query
filters and the dead letter's bulk requeue and discard. The views are jobs/api/runs.py."""
