"""Fault injection: run the real daemons against real PostgreSQL and Redis, inject faults
while load runs, then check DESIGN.md's invariants from the database (docs/reliability.md).

``manage.py chaos SCENARIO [--seed N] [--duration S] [--short]``.
"""
