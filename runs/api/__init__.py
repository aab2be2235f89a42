"""The runs REST API (docs/api.md, "Runs"; /api/queues/ too): the views (views.py),
serializers, query filters and the dead letter's bulk requeue and discard, built on
scheduler_core/rest/."""
