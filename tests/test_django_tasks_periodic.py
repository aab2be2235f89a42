"""Periodic django.tasks: a ``@task(cron=...)`` is one cron job, created or updated in place
when a scheduler starts, cancelled when the code no longer declares it
(docs/django-tasks.md, "Periodic tasks")."""

import dataclasses

import pytest

from jobs.models import Job
from jobs.schedules.scheduler import Scheduler
from scheduler_tasks import periodic
from tests import djtasks_tasks as t

pytestmark = pytest.mark.django_db(transaction=True)
NAME = "periodic:tests.djtasks_tasks.every_five_minutes"


def live():
    return list(Job.objects.filter(handler="django_task", name=NAME)
                .exclude(status="cancelled").select_related("schedule"))


def test_a_starting_scheduler_creates_the_cron_job_of_a_periodic_task_once():
    Scheduler(partitions=1).serve(max_rounds=1)
    [job] = live()
    assert (job.schedule.cron, job.schedule.timezone, job.schedule.misfire_policy,
            job.schedule.jitter_s) == ("*/5 * * * *", "Europe/Berlin", "skip", 3)
    assert job.payload["task"] == "tests.djtasks_tasks.every_five_minutes"
    assert job.next_run_at is not None

    Scheduler(partitions=1).serve(max_rounds=1)
    assert [j.pk for j in live()] == [job.pk]
    assert periodic.sync() == {"created": [], "updated": [], "cancelled": []}


def test_the_start_up_sync_says_what_it_made_under_the_scheduler_logger(caplog):
    # A project of its own configures the "scheduler" logger (docs/django-tasks.md); the
    # sync logged under "scheduler_tasks.periodic" and was silent there.
    with caplog.at_level("INFO", logger="scheduler"):
        Scheduler(partitions=1).serve(max_rounds=1)
    said = [r for r in caplog.records if r.name.startswith("scheduler.")
            and "periodic tasks: created" in r.getMessage()]
    assert len(said) == 1
    assert "tests.djtasks_tasks.every_five_minutes" in said[0].getMessage()


def test_a_deploy_that_changes_a_schedule_updates_the_same_job(monkeypatch):
    periodic.sync()
    [before] = live()
    changed = dataclasses.replace(t.every_five_minutes, cron="0 3 * * *",
                                  timezone="Asia/Tokyo", max_attempts=2)
    monkeypatch.setattr(t, "every_five_minutes", changed)

    assert periodic.sync()["updated"] == ["tests.djtasks_tasks.every_five_minutes"]
    [after] = live()
    assert after.pk == before.pk
    assert (after.schedule.cron, after.schedule.timezone, after.max_attempts) == (
        "0 3 * * *", "Asia/Tokyo", 2)


def test_a_deploy_that_moves_a_task_to_another_queue_replaces_its_job(monkeypatch):
    periodic.sync()
    [before] = live()
    monkeypatch.setattr(t, "every_five_minutes",
                        t.every_five_minutes.using(queue_name="reports"))

    periodic.sync()
    [after] = live()
    assert after.pk != before.pk and after.queue == "reports"
    assert Job.objects.get(pk=before.pk).status == "cancelled"


def test_a_deploy_that_removes_a_periodic_task_cancels_its_job(monkeypatch):
    periodic.sync()
    [job] = live()
    monkeypatch.setattr(t, "every_five_minutes", t.plain_function)

    assert periodic.sync()["cancelled"] == ["tests.djtasks_tasks.every_five_minutes"]
    assert live() == [] and Job.objects.get(pk=job.pk).status == "cancelled"
