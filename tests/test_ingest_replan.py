"""The bulk create's commit checks each new run's job by the primary key, even in a session
that cached the check's plan while ``jobs_job`` was analysed empty (jobs/ingest/copy.py,
replan_checks; BENCHMARKS.md, "Ingest (W1)"). Such a plan
scans the whole table once per run: REST bulk calls of 10,000 jobs stalled for 7 to 43 s
in their COMMIT. The plans are read from auto_explain, not timed."""

import pytest
from django.db import connection

from jobs import services

pytestmark = pytest.mark.django_db(transaction=True)


def specs(count: int, offset: int = 0) -> list[dict]:
    return [{"handler": "noop", "payload": {"i": i}} for i in range(offset, offset + count)]


def test_a_bulk_commit_checks_runs_against_jobs_by_primary_key_after_a_stale_plan():
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's cached plans")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job")  # empty: reltuples 0, as after a fresh deploy
    services.create_jobs(specs(20))  # the check's plan, cached while the table is tiny
    plans: list[str] = []
    connection.ensure_connection()
    raw = connection.connection
    raw.add_notice_handler(lambda notice: plans.append(notice.message_primary or ""))
    with connection.cursor() as cursor:
        cursor.execute("LOAD 'auto_explain'")
        for setting, value in (("log_min_duration", "0"), ("log_nested_statements", "on"),
                               ("log_level", "notice")):
            cursor.execute(f"SET auto_explain.{setting} = {value}")
    try:
        services.create_jobs(specs(2000, 20))
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET auto_explain.log_min_duration = -1")
    checks = [p for p in plans if 'FROM ONLY "public"."jobs_job"' in p]
    assert len(checks) >= 2000
    # By the key, as an index scan or (when PostgreSQL estimates so) a bitmap scan of it;
    # never a scan of the whole table.
    odd = [p for p in checks if "Seq Scan" in p or "jobs_job_pkey" not in p]
    assert not odd, odd[0]
