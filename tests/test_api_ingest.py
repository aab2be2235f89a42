"""The bulk ingest path behind POST /api/jobs/bulk/: create_jobs stores by COPY on
PostgreSQL and by bulk_create elsewhere, and both give the same saved rows."""

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User

from jobs import services
from jobs.models import Job
from jobs.schedules import cron
from jobs.tenants import set_owner_policy
from runs.models import Run

SPECS = [
    {"handler": "noop", "run_at": datetime(2030, 1, 1, tzinfo=UTC), "payload": {"n": 1},
     "name": "one-off", "priority": 2, "timeout_s": 30, "max_attempts": 2, "queue": "q1"},
    {"handler": "echo", "cron": "*/5 * * * *", "timezone": "Asia/Tokyo", "jitter_s": 7},
    {"handler": "echo", "cron": "*/5 * * * *", "timezone": "Asia/Tokyo"},
]


@pytest.mark.django_db(databases=["default", "sqlite"], transaction=True)
@pytest.mark.parametrize("using", ["default", "sqlite"])
def test_created_jobs_match_their_rows_and_carry_their_relations(using,
                                                                django_assert_num_queries):
    owner = User.objects.db_manager(using).create_user("alice")
    set_owner_policy(owner, queues=["q1"], highest_priority=0, using=using)

    jobs = services.create_jobs(SPECS, owner=owner, using=using)

    stored = {j.pk: j for j in Job.objects.using(using).select_related("schedule")}
    assert [j.pk for j in jobs] == sorted(stored)
    for job in jobs:
        row = stored[job.pk]
        assert (job.name, job.payload, job.run_at, job.next_run_at, job.created_at) == (
            row.name, row.payload, row.run_at, row.next_run_at, row.created_at)
        assert job._state.adding is False and job._state.db == using
    with django_assert_num_queries(0, using=using):  # relations cached, no lazy loads
        assert [j.owner.username for j in jobs] == ["alice"] * 3
        assert jobs[1].schedule.jitter_s == 7 and jobs[2].schedule.jitter_s == 0
    # One next occurrence per distinct (cron, timezone), computed from the database's now.
    assert jobs[1].next_run_at == jobs[2].next_run_at
    assert jobs[1].next_run_at == cron.next_after("*/5 * * * *", "Asia/Tokyo",
                                                  jobs[1].next_run_at - timedelta(minutes=5))
    assert timedelta(0) < jobs[1].next_run_at - jobs[1].created_at <= timedelta(minutes=5)
    [run] = Run.objects.using(using).all()
    assert (run.job_id, run.scheduled_at, run.state, run.queue, run.priority, run.attempt,
            run.max_attempts, run.result, run.error) == (
        jobs[0].pk, datetime(2030, 1, 1, tzinfo=UTC), "scheduled", "q1", 2, 0, 2, None, "")
