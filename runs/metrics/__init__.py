"""Read-only figures for operators (docs/scaling.md, docs/alerts.md): /metrics and
its families, and the queue and worker statistics behind /api/queues/ and the dashboard."""
