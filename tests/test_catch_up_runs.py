"""Catch-up runs (docs/cron.md, "Catch-up runs" and "Misfire policies"): run_once makes
one run, not two, after scheduler downtime and on resume; catch-up runs are marked, and
their lateness is left out of the lag of /metrics, /api/queues/ and the dashboard, which
count them apart."""

import time
from datetime import timedelta

import pytest

from jobs import services
from jobs.models import Job
from jobs.schedules.scheduler import Scheduler
from runs.clock import db_now
from runs.dashboard.figures import series, snapshot
from runs.metrics import stats
from runs.models import Run, RunState
from tests.conftest import flush_redis
from tests.test_api_helpers import client_for
from tests.test_metrics import at, scrape

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def clean_broker():
    flush_redis()
    yield
    flush_redis()


def due_now(job) -> list[Run]:
    """The job's runs that may start at once (run_at reached), oldest first."""
    return list(Run.objects.filter(job=job, state=RunState.SCHEDULED, run_at__lte=db_now())
                .order_by("scheduled_at"))


def clear_of_a_minute_boundary(margin_s: float = 12) -> None:
    """Wait, if the next minute boundary is less than ``margin_s`` seconds away, until just
    past it: a tick that falls after the boundary rightly makes that minute's run too (it is
    due), which a test counting the runs due now would read as a second run."""
    now = db_now()
    left = 60 - now.second - now.microsecond / 1e6
    if left < margin_s:
        time.sleep(left + 0.2)


def minutely_job_missed_since(minutes: float) -> Job:
    """A ``* * * * *`` run_once job whose scheduler has been down for ``minutes``: its
    next_run_at is that old, and the occurrence of the current minute is within the 60 s
    grace or just past it."""
    clear_of_a_minute_boundary()
    job = services.create_job("noop", cron="* * * * *")
    stale = db_now().replace(second=0, microsecond=0) - timedelta(minutes=minutes)
    Job.objects.filter(pk=job.pk).update(next_run_at=stale)
    return job


def test_run_once_after_downtime_makes_one_run_now_not_two():
    job = minutely_job_missed_since(10)

    Scheduler(partitions=1).tick()

    assert len(due_now(job)) == 1


def minutely_job_paused_for(minutes: float) -> Job:
    """A ``* * * * *`` run_once job paused ``minutes`` ago, the scheduler stopped then."""
    clear_of_a_minute_boundary()
    job = services.create_job("noop", cron="* * * * *")
    paused_at = db_now() - timedelta(minutes=minutes)
    Job.objects.filter(pk=job.pk).update(
        status=Job.Status.PAUSED, paused_at=paused_at,
        next_run_at=paused_at.replace(second=0, microsecond=0) + timedelta(minutes=1))
    return job


def test_resume_latest_of_a_run_once_job_makes_one_run_and_the_scheduler_adds_none():
    job = minutely_job_paused_for(10)

    services.resume([job.pk], catch_up="latest")
    Scheduler(partitions=1).tick()

    [run] = due_now(job)
    assert run.catch_up


def test_resume_skip_makes_no_run_now():
    job = minutely_job_paused_for(10)

    services.resume([job.pk])
    Scheduler(partitions=1).tick()

    assert due_now(job) == []


def test_the_scheduler_marks_missed_occurrences_as_catch_up_runs():
    job = minutely_job_missed_since(5)
    job.schedule.misfire_policy = "run_all"
    job.schedule.save()

    Scheduler(partitions=1).tick()

    now = db_now()
    runs = list(Run.objects.filter(job=job))
    missed = [r for r in runs if r.scheduled_at < now - timedelta(seconds=70)]
    recent = [r for r in runs if r.scheduled_at > now - timedelta(seconds=50)]
    assert len(missed) >= 4 and all(r.catch_up for r in missed)
    assert recent and not any(r.catch_up for r in recent)


def started_run(job, lag_s: float, catch_up: bool, ago_s: float = 10) -> Run:
    now = db_now()
    started = now - timedelta(seconds=ago_s)
    scheduled = started - timedelta(seconds=lag_s)
    run = Run.objects.create(
        job=job, scheduled_at=scheduled, run_at=scheduled, state=RunState.SUCCEEDED,
        queue=job.queue, attempt=1, started_at=started, finished_at=now,
        catch_up=catch_up)
    # Made when it was scheduled, not now: lag counts from the later of the two.
    Run.objects.filter(pk=run.pk).update(created_at=scheduled)
    return run


def test_catch_up_lateness_is_not_lag_and_is_counted_apart(admin_client):
    job = services.create_job("noop", delay_s=3600)
    for lag in (1.0, 2.0, 3.0):
        started_run(job, lag, catch_up=False)
    started_run(job, 600.0, catch_up=True)  # resumed after a pause: 10 minutes "late"

    [queue] = [q for q in stats.queue_stats() if q.queue == "default"]
    assert queue.lag_s == stats.Lag(count=3, p50_s=2.0, p99_s=2.98, max_s=3.0)
    samples = scrape()
    assert samples[("scheduler_queue_lag_seconds", at("default", 0, quantile="1"))] == 3.0
    assert samples[("scheduler_queue_started_catch_up_runs", at("default", 0))] == 1
    assert samples[("scheduler_queue_started_runs", at("default", 0))] == 3
    assert samples[("scheduler_start_lag_seconds_gcount", (("queue", "default"),))] == 3

    figures = series("default")
    assert max(v for v in figures["lag_p99_s"] if v is not None) < 10
    assert snapshot()["totals"]["catch_up_last_hour"] == 1
    page = admin_client.get("/admin/dashboard/").content.decode()
    assert "catch-up runs, last hour" in page


def test_the_api_shows_whether_a_run_is_a_catch_up_run(admin_user):
    job = services.create_job("noop", delay_s=3600)
    late = started_run(job, 600.0, catch_up=True)
    on_time = started_run(job, 1.0, catch_up=False, ago_s=20)

    api = client_for(admin_user)
    assert api.get(f"/api/runs/{late.pk}/").json()["catch_up"] is True
    assert api.get(f"/api/runs/{on_time.pk}/").json()["catch_up"] is False
