"""Pause and resume (jobs/schedules/pausing.py, docs/cron.md "Pause and resume"): a resume never
runs what was scheduled while the job was paused unless asked (catch_up latest or all,
within max lag); held runs end cancelled with the reason; scheduler downtime before the
pause still follows the misfire policy. On every broker/database pair.

Times are set up relative to the database clock: the job is made to look paused since
some minutes ago, with the run the scheduler had materialised just before the pause."""

from datetime import timedelta

import pytest

from jobs import services
from jobs.models import Job, Schedule
from jobs.schedules.scheduler import Scheduler
from runs.clock import db_now
from runs.execution.transitions import run_refs
from runs.models import Run, RunState
from scheduler_core.exceptions import InvalidJob

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])

MINUTE = timedelta(minutes=1)


def paused_cron_job(broker, paused_min: float = 4.5, behind_min: float = 0, **schedule):
    """A ``* * * * *`` job (misfire run_once unless ``schedule`` says) paused
    ``paused_min`` minutes ago, whose run for the first minute after the pause was
    materialised (and pushed) just before it; ``behind_min`` > 0: the scheduler was that
    many minutes behind at the pause (its next_run_at is older). Returns (job, held run,
    paused_at)."""
    using = broker.using
    job = services.create_job("noop", cron="* * * * *", using=using)
    if schedule:
        Schedule.objects.using(using).filter(pk=job.schedule_id).update(**schedule)
    paused_at = db_now(using) - timedelta(minutes=paused_min)
    first = paused_at.replace(second=0, microsecond=0) + MINUTE
    held = Run.objects.using(using).create(
        job=job, scheduled_at=first, run_at=first, queue=job.queue, shard=0,
        priority=job.priority, max_attempts=job.max_attempts)
    broker.push(run_refs(Run.objects.using(using).filter(pk=held.pk)))
    next_run_at = first + MINUTE if not behind_min else first - timedelta(minutes=behind_min)
    Job.objects.using(using).filter(pk=job.pk).update(
        status=Job.Status.PAUSED, paused_at=paused_at, next_run_at=next_run_at)
    return job, held, paused_at


def runnable(using, job) -> list:
    """scheduled_at of the job's runs that are not cancelled, in order."""
    return list(Run.objects.using(using).filter(job=job).exclude(state=RunState.CANCELLED)
                .order_by("scheduled_at").values_list("scheduled_at", flat=True))


def leased_times(broker, job, until=None) -> list:
    """scheduled_at of the job's runs a lease takes, in order; with ``until``, those at or
    before it only: a tick in a minute's last milliseconds also makes the next minute's
    run, which is live, not the resume's catch-up the tests are about."""
    broker.promote()
    ids = [lease.run_id for lease in broker.lease(["default"], 50, "w")]
    times = sorted(Run.objects.using(broker.using).filter(pk__in=ids, job=job)
                   .values_list("scheduled_at", flat=True))
    return [t for t in times if until is None or t <= until]


def interval_minutes(using, job, paused_at) -> list:
    """The occurrences of the paused interval: from the pause up to the resume (the job's
    next_run_at after resume is the first occurrence after it)."""
    end = Job.objects.using(using).get(pk=job.pk).next_run_at
    first = paused_at.replace(second=0, microsecond=0) + MINUTE
    return [first + i * MINUTE for i in range(int((end - first) / MINUTE))]


def test_resume_runs_nothing_scheduled_while_paused_by_default(broker):
    job, held, paused_at = paused_cron_job(broker)

    assert services.resume([job.pk], using=broker.using) == 1
    resumed_at = db_now(broker.using)
    Scheduler(using=broker.using, partitions=1).tick()

    held.refresh_from_db(using=broker.using)
    assert held.state == RunState.CANCELLED
    assert held.error.startswith("skipped: scheduled while its job was paused")
    assert "catch_up=skip" in held.error
    assert [t for t in runnable(broker.using, job) if t <= resumed_at] == []
    assert leased_times(broker, job, until=resumed_at) == []
    after = Job.objects.using(broker.using).get(pk=job.pk)
    assert (after.status, after.paused_at) == ("active", None)
    assert after.next_run_at > resumed_at


def test_resume_with_catch_up_latest_runs_only_the_latest_held_occurrence(broker):
    job, held, paused_at = paused_cron_job(broker)

    services.resume([job.pk], using=broker.using, catch_up="latest")
    # Before the tick: in a minute's last seconds its lookahead advances next_run_at.
    latest = interval_minutes(broker.using, job, paused_at)[-1]
    Scheduler(using=broker.using, partitions=1).tick()

    assert [t for t in runnable(broker.using, job) if t <= latest] == [latest]
    assert leased_times(broker, job, until=latest) == [latest]
    held.refresh_from_db(using=broker.using)
    assert held.state == RunState.CANCELLED and "catch_up=latest" in held.error


def test_resume_with_catch_up_all_runs_each_within_max_lag_once(broker):
    job, held, paused_at = paused_cron_job(broker, paused_min=6.5, max_lag_s=150)

    services.resume([job.pk], using=broker.using, catch_up="all")
    resumed_at = db_now(broker.using)
    interval = interval_minutes(broker.using, job, paused_at)  # before the tick, as above
    Scheduler(using=broker.using, partitions=1).tick()

    within = [t for t in interval if t >= resumed_at - timedelta(seconds=150)]
    assert 2 <= len(within) < len(interval)
    assert [t for t in runnable(broker.using, job) if t <= interval[-1]] == within
    assert leased_times(broker, job, until=interval[-1]) == within
    held.refresh_from_db(using=broker.using)
    assert held.state == RunState.CANCELLED  # older than the max lag


def test_downtime_before_the_pause_still_follows_the_misfire_policy(broker):
    """The scheduler was 5 minutes behind when the job was paused: those minutes were
    missed by downtime, so run_once gives one catch-up run for them; the paused minutes
    are skipped."""
    job, held, paused_at = paused_cron_job(broker, behind_min=5)

    services.resume([job.pk], using=broker.using)

    before_pause = [t for t in runnable(broker.using, job) if t < paused_at]
    assert before_pause == [paused_at.replace(second=0, microsecond=0)]
    assert [t for t in runnable(broker.using, job) if t >= paused_at] == []
    assert leased_times(broker, job) == before_pause


def test_a_run_scheduled_before_the_pause_runs_on_resume(broker):
    using = broker.using
    job = services.create_job("noop", delay_s=0, using=using)
    [run] = Run.objects.using(using).filter(job=job)
    Job.objects.using(using).filter(pk=job.pk).update(
        status=Job.Status.PAUSED, paused_at=run.scheduled_at + timedelta(seconds=1))

    services.resume([job.pk], using=using)

    assert leased_times(broker, job) == [run.scheduled_at]


def test_a_one_off_run_due_while_paused_is_skipped_or_run_on_request(broker):
    using = broker.using
    skipped = services.create_job("noop", delay_s=1, using=using)
    wanted = services.create_job("noop", delay_s=1, using=using)
    services.pause([skipped.pk, wanted.pk], using=using)
    Job.objects.using(using).filter(pk__in=[skipped.pk, wanted.pk]).update(
        paused_at=db_now(using) - timedelta(seconds=5))
    Run.objects.using(using).update(run_at=db_now(using) - timedelta(seconds=1),
                                    scheduled_at=db_now(using) - timedelta(seconds=1))

    services.resume([skipped.pk], using=using)
    services.resume([wanted.pk], using=using, catch_up="all")

    assert runnable(using, skipped) == []
    assert len(leased_times(broker, wanted)) == 1


def test_an_unknown_catch_up_is_refused_and_changes_nothing(broker):
    job, held, _ = paused_cron_job(broker)
    state = Run.objects.using(broker.using).get(pk=held.pk).state

    with pytest.raises(InvalidJob) as refused:
        services.resume([job.pk], using=broker.using, catch_up="run_once")

    assert "catch_up" in refused.value.errors
    assert Job.objects.using(broker.using).get(pk=job.pk).status == "paused"
    held.refresh_from_db(using=broker.using)
    assert held.state == state


def test_catch_up_runs_count_against_the_owners_pending_quota(api, alice, admin_client):
    """Three paused * * * * * jobs resumed with catch_up=all took an owner with
    max_pending=2 to 8 pending runs. Refused now, naming the quota, with nothing changed."""
    from jobs.tenants import set_owner_policy
    from runs.brokers import get_broker
    from runs.models import PENDING_STATES

    broker = get_broker("default")
    jobs = [paused_cron_job(broker)[0] for _ in range(3)]
    Job.objects.filter(pk__in=[job.pk for job in jobs]).update(owner=alice)
    set_owner_policy(alice, max_pending=4)
    pending = Run.objects.filter(job__owner=alice, state__in=PENDING_STATES)
    before = sorted(pending.values_list("pk", flat=True))
    assert len(before) == 3  # the held runs

    for job in jobs:
        refused = api.post(f"/api/jobs/{job.pk}/resume/", {"catch_up": "all"}, format="json")
        assert refused.status_code == 403
        assert (refused.json()["limit"], refused.json()["value"]) == ("max_pending", 4)
        assert Job.objects.get(pk=job.pk).status == "paused"
    page = admin_client.post("/admin/jobs/job/", {
        "action": "resume_jobs_all", "_selected_action": [str(job.pk) for job in jobs]},
        follow=True)
    assert "Nothing was resumed" in page.content.decode()
    assert sorted(pending.values_list("pk", flat=True)) == before
    assert not Job.objects.filter(owner=alice).exclude(status="paused").exists()

    assert api.post(f"/api/jobs/{jobs[0].pk}/resume/", {"catch_up": "latest"},
                    format="json").status_code == 200
    assert pending.count() <= 4
