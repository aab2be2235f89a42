"""bench/w5_load.py makes jobs the scheduler can materialise: W5 (bench/ours.py) inserts
its million cron jobs in SQL, past the model's defaults, and a NOT NULL column added to
jobs_job once broke it unseen (unique_key, unique_states)."""

import sys
from pathlib import Path

import pytest
from django.db import connection

from jobs.models import Job

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import w5_load  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)


def test_w5s_cron_jobs_are_stored_and_the_due_ones_materialise():
    if connection.vendor != "postgresql":
        pytest.skip("W5 runs on PostgreSQL (generate_series, jsonb)")
    from jobs.schedules.scheduler import Scheduler

    with connection.cursor() as cursor:
        w5_load.load_cron_jobs(cursor, 30, 10)
        w5_load.load_cron_jobs(cursor, 30, 10)  # already that size: nothing added
    assert Job.objects.count() == 30
    assert Job.objects.filter(schedule__cron="* * * * *").count() == 10
    scheduler = Scheduler()
    try:
        created = scheduler.tick()
    finally:
        scheduler.shutdown()
    assert created >= 10
