"""When a job created through the REST API runs: no time means now, ``delay_s`` means that
many seconds from now (the Python API's name), and two ways of saying when are refused
naming both (docs/api.md, "Create")."""

from datetime import timedelta

import pytest

from jobs import services
from jobs.models import Job
from runs.clock import db_now
from runs.models import Run, RunState

pytestmark = pytest.mark.django_db


def test_a_job_without_a_time_runs_once_now(api):
    before = db_now()
    answer = api.post("/api/jobs/", {"handler": "noop"}, format="json")

    assert answer.status_code == 201, answer.json()
    job = Job.objects.get(pk=answer.json()["id"])
    run = Run.objects.get(job=job)
    after = db_now()
    assert job.schedule is None and before <= job.run_at <= after
    assert run.state == RunState.SCHEDULED and run.run_at == job.run_at


def test_the_python_api_without_a_time_also_runs_now():
    before = db_now()
    job = services.create_job("noop")
    assert before <= job.run_at <= db_now()


def test_delay_s_schedules_that_many_seconds_from_now(api):
    before = db_now()
    answer = api.post("/api/jobs/", {"handler": "noop", "delay_s": 90}, format="json")

    assert answer.status_code == 201, answer.json()
    run_at = Job.objects.get(pk=answer.json()["id"]).run_at
    assert before + timedelta(seconds=90) <= run_at <= db_now() + timedelta(seconds=90)


def test_bulk_items_take_delay_s_and_no_time_too(api):
    answer = api.post("/api/jobs/bulk/", {"jobs": [
        {"handler": "noop"}, {"handler": "noop", "delay_s": 3600}]}, format="json")

    assert answer.status_code == 201, answer.json()
    now_job, later_job = Job.objects.filter(pk__in=answer.json()["ids"]).order_by("pk")
    assert later_job.run_at - now_job.run_at >= timedelta(seconds=3599)


@pytest.mark.parametrize("other, value, name", [
    ("run_at", "2030-01-01T00:00:00Z", "run_at"),
    ("cron", "@daily", "cron"),
])
def test_delay_s_with_run_at_or_schedule_is_refused_naming_both(api, other, value, name):
    answer = api.post("/api/jobs/", {"handler": "noop", "delay_s": 5, other: value},
                      format="json")

    assert answer.status_code == 400
    errors = answer.json()
    assert set(errors) == {"delay_s", name}
    assert "delay_s" in errors["delay_s"][0] and name in errors["delay_s"][0]
    assert not Job.objects.exists()


def test_a_bad_delay_s_is_named(api):
    answer = api.post("/api/jobs/", {"handler": "noop", "delay_s": "soon"}, format="json")
    assert answer.status_code == 400 and set(answer.json()) == {"delay_s"}
    assert not Job.objects.exists()
