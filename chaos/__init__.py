"""Fault injection: run the real daemons against real PostgreSQL and Redis, inject faults
while load runs, then check the invariants of docs/architecture.md from the database
(docs/reliability.md).

``manage.py chaos SCENARIO [--seed N] [--duration S] [--short]``.
"""
