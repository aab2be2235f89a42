"""The cron scheduler: misfire planning, paused jobs, and overlapping schedulers."""

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connections
from django.db.models import Count, Max

from jobs import services
from jobs.models import Job, MisfirePolicy, Schedule
from jobs.schedules.scheduler import Scheduler, plan_occurrences
from runs.clock import db_now
from runs.models import Run
from tests.conftest import daemon_env, flush_redis, start_daemon

NOW = datetime(2026, 3, 10, 12, 0, 30, tzinfo=UTC)


def cron_job(expr="* * * * *", policy=MisfirePolicy.RUN_ALL, max_lag_s=3600, next_run_at=None):
    job = Job(name="t", handler="noop",
              schedule=Schedule(cron=expr, misfire_policy=policy, max_lag_s=max_lag_s))
    job.next_run_at = next_run_at
    return job


def minutes(*offsets):
    base = NOW.replace(second=0)
    return [base + timedelta(minutes=m) for m in offsets]


@pytest.mark.parametrize("policy, expected", [
    (MisfirePolicy.RUN_ALL, minutes(-5, -4, -3, -2, -1, 0)),
    # run_once: one run now. 12:00 is due and within the grace, so it is that one run;
    # a catch-up run for 11:59 beside it would be two runs at once.
    (MisfirePolicy.RUN_ONCE, minutes(0)),
    (MisfirePolicy.SKIP, minutes(0)),
])
def test_missed_occurrences_follow_the_misfire_policy(policy, expected, settings):
    settings.SCHEDULER = {"MISFIRE_GRACE_S": 60}
    job = cron_job(policy=policy, next_run_at=minutes(-5)[0])

    times, next_run_at = plan_occurrences(job, NOW, NOW + timedelta(seconds=10))

    assert times == expected
    assert next_run_at == minutes(1)[0]


def test_occurrences_older_than_max_lag_are_dropped():
    job = cron_job(max_lag_s=120, next_run_at=NOW - timedelta(days=30))

    times, next_run_at = plan_occurrences(job, NOW, NOW + timedelta(seconds=10))

    assert times == minutes(-1, 0)  # 11:58 is 150 s old: past the 120 s max lag
    assert next_run_at == minutes(1)[0]


def test_lookahead_stages_the_next_minute_before_it_starts():
    job = cron_job(next_run_at=minutes(1)[0])
    just_before = NOW.replace(second=55)

    times, next_run_at = plan_occurrences(job, just_before, just_before + timedelta(seconds=10))

    assert times == minutes(1)
    assert next_run_at == minutes(2)[0]


@pytest.mark.django_db(transaction=True)
def test_a_paused_job_creates_no_runs_and_resume_catches_up_once():
    flush_redis()
    job = services.create_job("noop", cron="* * * * *")
    services.pause([job.pk])
    Job.objects.filter(pk=job.pk).update(next_run_at=db_now() - timedelta(minutes=10))

    scheduler = Scheduler(partitions=1)
    assert scheduler.tick() == 0

    services.resume([job.pk])
    scheduler.tick()
    times = list(Run.objects.filter(job=job).order_by("scheduled_at")
                 .values_list("scheduled_at", flat=True))
    # run_once: one catch-up for ten missed minutes, plus whatever the lookahead reaches.
    assert 1 <= len(times) <= 3
    assert times[0] >= db_now() - timedelta(minutes=2)


def _cron_jobs_due_since(count: int, minutes_back: int) -> tuple[list[int], datetime]:
    jobs = services.create_jobs([
        {"name": f"every minute {i}", "handler": "noop", "cron": "* * * * *",
         "misfire_policy": "run_all", "timeout_s": 60, "max_attempts": 1}
        for i in range(count)
    ])
    start = db_now().replace(second=0, microsecond=0) - timedelta(minutes=minutes_back)
    Job.objects.filter(pk__in=[j.pk for j in jobs]).update(next_run_at=start)
    return [j.pk for j in jobs], start


def _assert_every_occurrence_exactly_once(job_ids, start):
    dupes = (Run.objects.values("job_id", "scheduled_at").annotate(n=Count("id"))
             .filter(n__gt=1).count())
    assert dupes == 0
    for job in Job.objects.filter(pk__in=job_ids):
        expected = []
        moment = start
        while moment < job.next_run_at:
            expected.append(moment)
            moment += timedelta(minutes=1)
        got = list(Run.objects.filter(job=job).order_by("scheduled_at")
                   .values_list("scheduled_at", flat=True))
        assert got == expected, f"job {job.pk}"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_two_scheduler_processes_create_each_occurrence_once(tmp_path):
    flush_redis()
    job_ids, start = _cron_jobs_due_since(1000, minutes_back=4)
    env = daemon_env("redis", schedule_batch=50, partitions=8)

    procs = [start_daemon(["runscheduler", "--max-ticks", "4"], env, tmp_path / f"s{i}.log")
             for i in range(2)]
    codes = [p.wait(timeout=180) for p in procs]

    assert codes == [0, 0], [(tmp_path / f"s{i}.log").read_text()[-2000:] for i in range(2)]
    assert Run.objects.count() >= 2000
    assert Job.objects.filter(pk__in=job_ids).aggregate(m=Max("next_run_at"))["m"] > db_now()
    _assert_every_occurrence_exactly_once(job_ids, start)


@pytest.mark.django_db(transaction=True)
def test_schedulers_that_both_claim_every_partition_still_create_each_occurrence_once():
    flush_redis()
    job_ids, start = _cron_jobs_due_since(300, minutes_back=10)
    barrier = threading.Barrier(3)
    errors = []

    def race(name):
        try:
            scheduler = Scheduler(scheduler_id=name, partitions=1)
            barrier.wait()
            while scheduler.materialize([0])[1]:
                pass
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=race, args=(f"s{i}",)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)

    assert errors == []
    assert Run.objects.count() >= 3000
    _assert_every_occurrence_exactly_once(job_ids, start)


@pytest.mark.parametrize("policy, expected", [
    (MisfirePolicy.RUN_ALL, ["12:10", "12:20", "12:30"]),
    (MisfirePolicy.RUN_ONCE, ["12:30"]),
    (MisfirePolicy.SKIP, []),
])
def test_the_misfire_example_of_docs_cron_md(policy, expected):
    """A */10 job whose scheduler was down from 12:01 to 12:35: its next_run_at is still
    12:10."""
    now = datetime(2026, 3, 10, 12, 35, tzinfo=UTC)
    job = cron_job("*/10 * * * *", policy=policy,
                   next_run_at=datetime(2026, 3, 10, 12, 10, tzinfo=UTC))

    times, next_run_at = plan_occurrences(job, now, now + timedelta(seconds=10))

    assert [t.strftime("%H:%M") for t in times] == expected
    assert next_run_at == datetime(2026, 3, 10, 12, 40, tzinfo=UTC)


def test_a_long_run_all_catch_up_continues_on_the_next_tick():
    job = cron_job(max_lag_s=86_400, next_run_at=NOW - timedelta(hours=20))

    times, next_run_at = plan_occurrences(job, NOW, NOW + timedelta(seconds=10), limit=1000)

    assert len(times) == 1000 and times[0] == minutes(-1199)[0]  # 16:01, after 16:00:30
    assert next_run_at == times[-1] + timedelta(minutes=1)


def test_a_schedule_with_no_occurrence_left_gets_no_next_run_at():
    end = datetime(9999, 6, 1, tzinfo=UTC)
    job = cron_job("0 0 1 1 *", next_run_at=end)

    assert plan_occurrences(job, end, end + timedelta(seconds=10)) == ([], None)
