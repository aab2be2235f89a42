"""Backfill (docs/cron.md, "Backfill"): the Python API and ``manage.py backfill`` on every
broker/database pair. The occurrences are the schedule's own in its timezone, the range
is [start, end), a second backfill of a range makes nothing new, the bound and the
owner's quota are refused whole, and each run made is a normal run the broker hands out,
retried and dead-lettered as any other."""

from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from jobs import services
from jobs.models import Backfill, Job
from jobs.schedules.backfill import backfill_job, finished_count
from jobs.tenants import QuotaExceeded, set_owner_policy
from runs.clock import db_now
from runs.models import Run, RunState
from runs.types import Outcome
from scheduler_core.exceptions import InvalidJob, SchedulerError
from workflows import services as workflows
from workflows.backfill import backfill_workflow
from workflows.backfill import finished_count as workflow_finished
from workflows.models import WorkflowBackfill, WorkflowRun

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


def cron_job(using: str, cron: str = "0 * * * *", **options) -> Job:
    return services.create_job("noop", {}, cron=cron, using=using, **options)


def day_ago(using: str) -> datetime:
    """The start of the hour a day before the database's now (UTC)."""
    return (db_now(using) - timedelta(days=1)).replace(minute=0, second=0, microsecond=0)


def test_a_backfill_makes_a_normal_run_per_occurrence_end_exclusive(broker):
    using = broker.using
    job = cron_job(using)
    start = day_ago(using)

    record = backfill_job(job.pk, start.isoformat(), (start + timedelta(hours=3)).isoformat(),
                          using=using)

    runs = list(Run.objects.using(using).filter(job=job, backfill_id=record.pk)
                .order_by("scheduled_at"))
    assert [r.scheduled_at for r in runs] == [start + timedelta(hours=h) for h in range(3)]
    assert (record.total, record.made, record.skipped) == (3, 3, 0)
    assert record.done_at is not None and record.error == ""
    assert {r.state for r in runs} == {RunState.SCHEDULED}
    assert Backfill.objects.using(using).get(pk=record.pk).made == 3
    # The broker hands them out (they are due), and they fail and retry as any run.
    broker.promote()
    leases = broker.lease(["default"], 10, "w-backfill")
    assert sorted(lease.run_id for lease in leases) == [r.pk for r in runs]
    lease = next(lease for lease in leases if lease.run_id == runs[0].pk)
    broker.complete([Outcome(lease, "failed", None, "boom", [])])
    assert Run.objects.using(using).get(pk=runs[0].pk).state == RunState.RETRYING


def test_a_second_backfill_of_the_same_range_makes_nothing(broker):
    using = broker.using
    job = cron_job(using, cron="*/30 * * * *")
    start = day_ago(using)
    end = start + timedelta(hours=2)

    first = backfill_job(job.pk, start, end, using=using)
    second = backfill_job(job.pk, start, end, using=using)
    wider = backfill_job(job.pk, start - timedelta(hours=1), end, using=using)

    assert (first.made, first.skipped) == (4, 0)
    assert (second.made, second.skipped) == (0, 4)
    assert (wider.made, wider.skipped) == (2, 4)
    assert Run.objects.using(using).filter(job=job).count() == 6


def test_an_occurrence_the_scheduler_made_is_skipped(broker):
    using = broker.using
    job = cron_job(using)
    start = day_ago(using)
    Run.objects.using(using).create(job=job, scheduled_at=start, run_at=start)

    record = backfill_job(job.pk, start, start + timedelta(hours=2), using=using)

    assert (record.made, record.skipped) == (1, 1)
    assert Run.objects.using(using).get(job=job, scheduled_at=start).backfill_id is None


def test_occurrences_follow_the_jobs_timezone_and_a_naive_time_is_read_there(broker):
    using = broker.using
    job = cron_job(using, cron="30 9 * * *", timezone="Asia/Kolkata")  # 04:00 UTC

    record = backfill_job(job.pk, "2026-01-01", "2026-01-03", using=using)

    times = sorted(Run.objects.using(using).filter(job=job, backfill_id=record.pk)
                   .values_list("scheduled_at", flat=True))
    assert times == [datetime(2026, 1, 1, 4, 0, tzinfo=UTC), datetime(2026, 1, 2, 4, 0,
                                                                      tzinfo=UTC)]
    assert record.start == datetime(2025, 12, 31, 18, 30, tzinfo=UTC)


def test_occurrences_after_now_are_left_to_the_scheduler(broker):
    using = broker.using
    job = cron_job(using, cron="* * * * *")
    now = db_now(using)

    record = backfill_job(job.pk, now - timedelta(minutes=3), now + timedelta(days=1),
                          using=using)

    assert record.total in (3, 4)  # the minutes before now, now's own if it is whole
    assert Run.objects.using(using).filter(job=job, scheduled_at__gt=now).count() == 0


def test_a_range_over_the_limit_is_refused_whole_naming_the_limit(broker, settings):
    using = broker.using
    settings.SCHEDULER = {"BACKFILL_MAX_OCCURRENCES": 5}
    job = cron_job(using)
    start = day_ago(using)

    with pytest.raises(InvalidJob) as refused:
        backfill_job(job.pk, start, start + timedelta(hours=6), using=using)

    assert "BACKFILL_MAX_OCCURRENCES" in refused.value.errors["end"]
    assert "more than 5 occurrences" in refused.value.errors["end"]
    assert not Run.objects.using(using).filter(job=job).exists()
    assert not Backfill.objects.using(using).exists()
    assert backfill_job(job.pk, start, start + timedelta(hours=5), using=using).made == 5


@pytest.mark.parametrize("start, end, field, words", [
    (None, "2026-01-02", "start", "required"),
    ("yesterday", "2026-01-02", "start", "ISO 8601"),
    ("2026-01-02", "2026-13-01", "end", "ISO 8601"),
    ("2026-01-02", "2026-01-01", "end", "after start"),
    ("2026-01-02", "2026-01-02", "end", "after start"),
    ("1969-12-01", "2026-01-02", "start", "1970"),
    ("9998-12-01", "9998-12-02", "start", "future"),
    ("2026-01-01", "10000-01-01", "end", "ISO 8601"),
])
def test_a_bad_range_names_its_field(broker, start, end, field, words):
    job = cron_job(broker.using)

    with pytest.raises(InvalidJob) as refused:
        backfill_job(job.pk, start, end, using=broker.using)

    assert words in refused.value.errors[field]


def test_one_off_paused_and_node_jobs_are_refused(broker):
    using = broker.using
    one_off = services.create_job("noop", {}, delay_s=60, using=using)
    paused = cron_job(using)
    services.pause([paused.pk], using=using)
    start = day_ago(using)

    for job, words in ((one_off, "one-off"), (paused, "paused")):
        with pytest.raises(SchedulerError, match=words):
            backfill_job(job.pk, start, start + timedelta(hours=1), using=using)


def test_the_owners_pending_quota_is_respected_before_anything_is_made(broker):
    using = broker.using
    owner = get_user_model().objects.db_manager(using).create_user("quota-owner")
    set_owner_policy(owner, max_pending=3, using=using)
    job = cron_job(using, owner=owner)
    start = day_ago(using)

    with pytest.raises(QuotaExceeded, match="max_pending"):
        backfill_job(job.pk, start, start + timedelta(hours=4), using=using)

    assert not Run.objects.using(using).filter(job=job).exists()
    assert backfill_job(job.pk, start, start + timedelta(hours=3), using=using).made == 3


def test_finished_counts_only_this_backfills_runs_that_ended(broker):
    using = broker.using
    job = cron_job(using)
    start = day_ago(using)
    record = backfill_job(job.pk, start, start + timedelta(hours=3), using=using)
    Run.objects.using(using).filter(job=job, scheduled_at=start).update(
        state=RunState.SUCCEEDED)
    again = backfill_job(job.pk, start, start + timedelta(hours=3), using=using)

    assert finished_count(record) == 1
    assert finished_count(again) == 0


def test_a_cron_workflow_is_backfilled_once_per_occurrence(broker):
    using = broker.using
    flow = workflows.create_workflow("nightly", [{"name": "a", "handler": "noop"},
                                                 {"name": "b", "handler": "noop"}],
                                     [["a", "b"]], schedule="0 * * * *", using=using)
    start = day_ago(using)

    first = backfill_workflow(flow.pk, start, start + timedelta(hours=2), using=using)
    second = backfill_workflow(flow.pk, start, start + timedelta(hours=3), using=using)

    made = WorkflowRun.objects.using(using).filter(workflow=flow).order_by("scheduled_at")
    assert [r.scheduled_at for r in made] == [start + timedelta(hours=h) for h in range(3)]
    assert {r.started_by for r in made} == {WorkflowRun.StartedBy.BACKFILL}
    assert (first.made, first.skipped, second.made, second.skipped) == (2, 0, 1, 2)
    assert WorkflowBackfill.objects.using(using).count() == 2
    assert workflow_finished(first) == 0
    # Each backfilled workflow run started its root node: a run the broker hands out.
    broker.promote()
    assert len(broker.lease(["default"], 10, "w-flow")) == 3


def test_a_workflow_without_schedule_is_refused(broker):
    flow = workflows.create_workflow("adhoc", [{"name": "a", "handler": "noop"}], [],
                                     using=broker.using)
    start = day_ago(broker.using)

    with pytest.raises(SchedulerError, match="no schedule"):
        backfill_workflow(flow.pk, start, start + timedelta(hours=1), using=broker.using)


def test_the_command_backfills_and_reports_made_and_skipped(broker):
    using = broker.using
    job = cron_job(using)
    start = day_ago(using)
    args = ["backfill", "--job", str(job.pk), "--start", start.isoformat(),
            "--end", (start + timedelta(hours=2)).isoformat(), "--database", using]

    first, second = StringIO(), StringIO()
    call_command(*args, stdout=first)
    call_command(*args, stdout=second)

    assert "2 occurrences" in first.getvalue() and "2 runs made, 0 skipped" in first.getvalue()
    assert "0 runs made, 2 skipped" in second.getvalue()
    assert Run.objects.using(using).filter(job=job).count() == 2


def test_the_command_names_the_bad_option_and_the_limit(broker, settings):
    using = broker.using
    settings.SCHEDULER = {"BACKFILL_MAX_OCCURRENCES": 2}
    job = cron_job(using)
    start = day_ago(using)

    with pytest.raises(CommandError, match="--start"):
        call_command("backfill", "--job", str(job.pk), "--start", "soon", "--end",
                     start.isoformat(), "--database", using)
    with pytest.raises(CommandError, match="BACKFILL_MAX_OCCURRENCES"):
        call_command("backfill", "--job", str(job.pk), "--start", start.isoformat(),
                     "--end", (start + timedelta(hours=5)).isoformat(), "--database", using)
    with pytest.raises(CommandError, match="no job 999999"):
        call_command("backfill", "--job", "999999", "--start", "2026-01-01", "--end",
                     "2026-01-02", "--database", using)


def test_the_command_backfills_a_workflow(broker):
    using = broker.using
    flow = workflows.create_workflow("hourly", [{"name": "a", "handler": "noop"}], [],
                                     schedule="0 * * * *", using=using)
    start = day_ago(using)
    out = StringIO()

    call_command("backfill", "--workflow", str(flow.pk), "--start", start.isoformat(),
                 "--end", (start + timedelta(hours=2)).isoformat(), "--database", using,
                 stdout=out)

    assert "2 runs made" in out.getvalue()
    assert WorkflowRun.objects.using(using).filter(workflow=flow).count() == 2


@pytest.mark.slow
def test_the_command_shows_a_progress_bar_on_a_terminal():
    from tests.conftest import daemon_env
    from tests.test_progress import _on_a_terminal

    job = cron_job("default", cron="*/5 * * * *")
    start = day_ago("default")
    env = {**daemon_env("database"), "TERM": "xterm", "COLUMNS": "100"}

    shown = _on_a_terminal(["backfill", "--job", str(job.pk), "--start", start.isoformat(),
                            "--end", (start + timedelta(hours=12)).isoformat()], env)

    assert f"backfilling job {job.pk}" in shown
    assert "144 occurrences" in shown and "144 runs made" in shown
    assert Run.objects.filter(job=job, backfill_id__isnull=False).count() == 144


def test_backfills_racing_over_one_range_make_each_run_once(broker):
    from tests.test_workflows_races import race

    using = broker.using
    if using != "default":
        pytest.skip("SQLite serialises writers: there is no race to lose")
    job = cron_job(using, cron="*/10 * * * *")
    flow = workflows.create_workflow("raced", [{"name": "a", "handler": "noop"}], [],
                                     schedule="*/10 * * * *", using=using)
    start = day_ago(using)
    end = start + timedelta(hours=4)

    errors = race(*[lambda: backfill_job(job.pk, start, end, using=using)] * 3,
                  *[lambda: backfill_workflow(flow.pk, start, end, using=using)] * 3)

    assert errors == []
    assert Run.objects.using(using).filter(job=job).count() == 24
    records = Backfill.objects.using(using).filter(job=job)
    assert sum(r.made for r in records) == 24 and sum(r.skipped for r in records) == 48
    assert WorkflowRun.objects.using(using).filter(workflow=flow).count() == 24


def test_an_owners_backfills_racing_over_disjoint_ranges_all_finish(broker):
    """With an owner's quota to check, the planning step took the owner's lock and then
    the job row, the making step the other way round: PostgreSQL found a deadlock and
    half the requests answered 500 (an adversarial pass, 8 at once)."""
    from django.contrib.auth.models import User

    from tests.test_workflows_races import race

    using = broker.using
    if using != "default":
        pytest.skip("SQLite serialises writers: there is no race to lose")
    owner = User.objects.db_manager(using).create_user("racer")
    job = cron_job(using, cron="*/10 * * * *", owner=owner)
    flow = workflows.create_workflow("raced", [{"name": "a", "handler": "noop"}], [],
                                     schedule="*/10 * * * *", owner=owner, using=using)
    start = day_ago(using)
    spans = [(start + timedelta(hours=i), start + timedelta(hours=i + 1)) for i in range(6)]

    errors = race(*[lambda s=s, e=e: backfill_job(job.pk, s, e, using=using)
                    for s, e in spans],
                  *[lambda s=s, e=e: backfill_workflow(flow.pk, s, e, using=using)
                    for s, e in spans])

    assert errors == []
    assert Run.objects.using(using).filter(job=job).count() == 36
    assert WorkflowRun.objects.using(using).filter(workflow=flow).count() == 36
