"""The workflows REST API (docs/api.md, "Workflows"): the views of /api/workflows/ and
/api/workflow-runs/ (views.py), their serializers, and a cron workflow's backfill
(backfill.py)."""
