"""A backfill whose process dies (docs/cron.md, "Backfill"): gunicorn's timeout ends a
request's worker with SystemExit, a crash anywhere. Killed before its first chunk
committed it once left a row of total N, made 0, no error and no done_at that looked in
progress for ever, one more per retry; now the row is made with the first chunk, and a
backfill killed later shows "stopped" once it made no progress for STOPPED_AFTER. A
rerun of the range makes only what is missing."""

from datetime import timedelta

import pytest

from jobs import services
from jobs.admin.backfill import BackfillAdminBase
from jobs.models import Backfill
from jobs.schedules import backfill as job_backfill
from runs.clock import db_now
from runs.models import Run
from workflows import backfill as workflow_backfill
from workflows import services as workflows
from workflows.models import WorkflowBackfill, WorkflowRun

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


def day_ago(using):
    return (db_now(using) - timedelta(days=1)).replace(minute=0, second=0, microsecond=0)


def killed_at_chunk(monkeypatch, module, name, chunk):
    """Make ``module.name`` (a backfill's chunk maker) do its work, then end the process
    as gunicorn's timeout does, from its ``chunk``-th call on (1: the first)."""
    real, calls = getattr(module, name), []

    def dying(*args, **kwargs):
        made = real(*args, **kwargs)
        calls.append(made)
        if len(calls) >= chunk:
            raise SystemExit(1)
        return made
    monkeypatch.setattr(module, name, dying)


def cron_job(using):
    return services.create_job("noop", {}, cron="0 * * * *", using=using)


def cron_workflow(using):
    return workflows.create_workflow("hourly", [{"name": "a", "handler": "noop"}],
                                     schedule="0 * * * *", using=using)


TARGETS = {
    "job": (cron_job, job_backfill.backfill_job, job_backfill, "_make_runs", Backfill,
            lambda using, target: Run.objects.using(using).filter(job=target)),
    "workflow": (cron_workflow, workflow_backfill.backfill_workflow, workflow_backfill,
                 "_start_runs", WorkflowBackfill,
                 lambda using, target: WorkflowRun.objects.using(using).filter(
                     workflow=target)),
}


@pytest.mark.parametrize("kind", TARGETS)
def test_a_backfill_killed_in_its_first_chunk_leaves_no_row(broker, monkeypatch, kind):
    make_target, backfill, module, maker, model, made = TARGETS[kind]
    using = broker.using
    target = make_target(using)
    start = day_ago(using)
    killed_at_chunk(monkeypatch, module, maker, 1)

    for _ in range(2):  # each retry once added another row
        with pytest.raises(SystemExit):
            backfill(target.pk, start, start + timedelta(hours=5), using=using)

    assert model.objects.using(using).count() == 0
    assert made(using, target).count() == 0


@pytest.mark.parametrize("kind", TARGETS)
def test_a_backfill_killed_part_way_shows_stopped_and_a_rerun_finishes_it(
        broker, monkeypatch, kind):
    from jobs.models.backfill import STOPPED_AFTER  # here: the other test runs without it

    make_target, backfill, module, maker, model, made = TARGETS[kind]
    using = broker.using
    target = make_target(using)
    start, end = day_ago(using), day_ago(using) + timedelta(hours=5)
    monkeypatch.setattr(job_backfill, "CHUNK", 2)
    killed_at_chunk(monkeypatch, module, maker, 2)

    with pytest.raises(SystemExit):
        backfill(target.pk, start, end, using=using)

    record = model.objects.using(using).get()
    assert (record.total, record.made, record.done_at, record.error) == (5, 2, None, "")
    now = db_now(using)
    assert record.state(now) == "making"  # a live one looks the same, for a while
    later = now + STOPPED_AFTER + timedelta(seconds=1)
    assert record.state(later) == "stopped"
    assert BackfillAdminBase.progress_text(record, later).startswith("stopped at 2 of 5")

    monkeypatch.undo()
    again = backfill(target.pk, start, end, using=using)
    assert (again.made, again.skipped, again.state(db_now(using))) == (3, 2, "done")
    assert made(using, target).count() == 5
