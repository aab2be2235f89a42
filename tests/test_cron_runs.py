"""Times as the runs see them (real PostgreSQL and Redis): jitter recorded on each run and
honoured by the brokers, one-off run_at in the past or years ahead, and a fixed-time job
across a DST change materialised by the real scheduler."""

from datetime import UTC, datetime, timedelta

import pytest

from jobs import services
from jobs.models import Job, Schedule
from jobs.schedules import cron
from jobs.schedules.scheduler import Scheduler, plan_occurrences
from runs.brokers import get_broker
from runs.brokers.redis.keys import member
from runs.clock import db_now
from runs.execution.transitions import run_refs
from runs.models import Run
from scheduler_core.exceptions import InvalidJob
from tests.conftest import flush_redis

BROKERS = ["redis", "database"]  # both on PostgreSQL


def leased_ids(broker) -> list[int]:
    broker.promote()
    return [lease.run_id for lease in broker.lease(["default"], 100, "w1")]


def push_all(broker, job_ids) -> None:
    broker.push(run_refs(Run.objects.filter(job_id__in=job_ids)))


def jittered_job(jitter_s: int, at_least: float) -> Job:
    """A ``* * * * *`` job whose jitter offset is at least ``at_least`` seconds (the offset
    comes from the job id, so create jobs until one qualifies; most do). A jitter_s of a
    minute or more is planted, as a row stored before jitter had to be shorter than the
    schedule's gap: the API refuses it now, the scheduler still honours a stored one."""
    for _ in range(50):
        job = services.create_jobs([{"name": "jittered", "handler": "noop",
                                     "cron": "* * * * *", "misfire_policy": "run_all"}])[0]
        Schedule.objects.filter(pk=job.schedule_id).update(jitter_s=jitter_s)
        job = Job.objects.select_related("schedule").get(pk=job.pk)
        if cron.jitter_offset(job.pk, jitter_s) >= at_least:
            return job
    raise AssertionError("no job id gave a large enough offset")


@pytest.mark.django_db(transaction=True)
def test_scheduler_records_jitter_on_each_run_and_delays_run_at_by_it():
    flush_redis()
    job = jittered_job(3600, at_least=1)
    plain = services.create_jobs([{"name": "plain", "handler": "noop", "cron": "* * * * *",
                                   "misfire_policy": "run_all"}])[0]
    minute = db_now().replace(second=0, microsecond=0)
    Job.objects.filter(pk__in=[job.pk, plain.pk]).update(next_run_at=minute)

    Scheduler(partitions=1).tick()

    offset = cron.jitter_offset(job.pk, 3600)
    runs = list(Run.objects.filter(job=job))
    assert runs and all(r.jitter_s == offset for r in runs)
    assert all(r.run_at - r.scheduled_at == timedelta(seconds=offset) for r in runs)
    assert all(r.jitter_s == 0 and r.run_at == r.scheduled_at
               for r in Run.objects.filter(job=plain))
    assert job.schedule.jitter_s == 3600


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("name", BROKERS)
def test_a_run_never_starts_before_scheduled_at_plus_its_jitter(name):
    flush_redis()
    broker = get_broker("default", name=name)
    job = jittered_job(3600, at_least=600)
    plain = services.create_jobs([{"name": "plain", "handler": "noop", "cron": "* * * * *",
                                   "misfire_policy": "run_all"}])[0]
    minute = db_now().replace(second=0, microsecond=0)
    Job.objects.filter(pk__in=[job.pk, plain.pk]).update(next_run_at=minute)
    Scheduler(partitions=1).tick()
    push_all(broker, [job.pk, plain.pk])

    leased = leased_ids(broker)

    due_plain = Run.objects.get(job=plain, scheduled_at=minute)
    jittered = Run.objects.get(job=job, scheduled_at=minute)
    assert due_plain.pk in leased       # the same occurrence without jitter starts now
    assert jittered.pk not in leased    # scheduled_at has passed, scheduled_at + jitter not
    assert jittered.run_at > db_now()


@pytest.mark.django_db
@pytest.mark.parametrize("spec, message", [
    ({"cron": "* * * * *", "jitter_s": -1}, "from 0 to 86400"),
    ({"cron": "* * * * *", "jitter_s": 86_401}, "from 0 to 86400"),
    ({"cron": "* * * * *", "jitter_s": 1.5}, "from 0 to 86400"),
    ({"cron": "* * * * *", "jitter_s": True}, "from 0 to 86400"),
    ({"run_at": datetime(2030, 1, 1, tzinfo=UTC), "jitter_s": 30}, "cron schedules only"),
])
def test_bad_jitter_is_refused_naming_the_field(spec, message):
    with pytest.raises(InvalidJob) as error:
        services.create_jobs([{"handler": "noop", **spec}])

    assert message in error.value.errors["[0].jitter_s"]
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_misfire_policy_and_max_lag_default_to_run_once_and_one_hour():
    job = services.create_jobs([{"handler": "noop", "cron": "@hourly"}])[0]

    assert (job.schedule.misfire_policy, job.schedule.max_lag_s, job.schedule.jitter_s) == (
        "run_once", 3600, 0)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("name", BROKERS)
def test_a_one_off_run_at_in_the_past_runs_now(name):
    flush_redis()
    broker = get_broker("default", name=name)
    job = services.create_job("noop", run_at=db_now() - timedelta(days=400))
    push_all(broker, [job.pk])

    assert leased_ids(broker) == [Run.objects.get(job=job).pk]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("name", BROKERS)
def test_a_one_off_run_at_years_ahead_is_stored_exactly_and_waits(name):
    flush_redis()
    broker = get_broker("default", name=name)
    when = (db_now() + timedelta(days=365 * 40)).replace(microsecond=123000)
    job = services.create_job("noop", run_at=when)
    soon = services.create_job("noop", run_at=db_now() - timedelta(seconds=1))
    push_all(broker, [job.pk, soon.pk])

    assert leased_ids(broker) == [Run.objects.get(job=soon).pk]
    run = Run.objects.get(job=job)
    assert (run.scheduled_at, run.run_at, run.state) == (when, when, "scheduled")
    if name == "redis":  # the delayed score keeps the millisecond (docs/architecture.md)
        score = broker.client.zscore(broker.keys.delayed("default", run.shard),
                                      member(run.pk))
        assert score == int(when.timestamp() * 1000) * 10 + run.priority


@pytest.mark.django_db(transaction=True)
def test_a_fixed_time_job_missed_across_fall_back_gets_one_run_not_two():
    flush_redis()
    job = services.create_jobs([{"handler": "noop", "cron": "30 2 * * *",
                                 "timezone": "Europe/Berlin", "misfire_policy": "run_all",
                                 "max_lag_s": 86_400}])[0]
    job.next_run_at = datetime(2025, 10, 25, 23, 0, tzinfo=UTC)
    now = datetime(2025, 10, 26, 3, 0, tzinfo=UTC)  # after both passes of 02:30

    times, next_run_at = plan_occurrences(job, now, now + timedelta(seconds=10))

    assert times == [datetime(2025, 10, 26, 0, 30, tzinfo=UTC)]
    assert next_run_at == datetime(2025, 10, 27, 1, 30, tzinfo=UTC)

