"""runs/flow/control.py's in_use asks about once a second, in every daemon, whether any job has a
rate or concurrency key. On a table of millions of unkeyed jobs that was a full scan each
time; its condition is now the partial index job_flow_keyed's, which PostgreSQL can serve
it from (planner costs aside: the test turns sequential scans off to ask only that)."""

import pytest
from django.db import connection

from jobs.models import Job
from runs.flow.control import FLOW_KEYED

pytestmark = [pytest.mark.django_db,
              pytest.mark.postgresql_only("a partial index and EXPLAIN are PostgreSQL's")]


def test_the_keyed_jobs_question_is_answered_from_the_partial_index():
    sql, params = Job.objects.filter(FLOW_KEYED).values("id")[:1].query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "job_flow_keyed" in plan, plan
