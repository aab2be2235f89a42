"""Expiry (the fields ``expires_at`` / ``expires_in_s``: runs/execution/expiry.py,
docs/retries-and-expiry.md) on every broker/database pair: a run whose expiry passed
before a worker took it ends ``expired`` with the reason, its handler never runs, and it
is counted; a run within its expiry runs as before; a workflow node whose run expired
fails its downstream."""

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from jobs import services
from jobs.registry import handler
from runs import signals
from runs.execution import outcomes
from runs.execution.transitions import run_refs
from runs.metrics import stats
from runs.models import Attempt, Run, RunState
from runs.worker import Worker
from workflows import services as workflows
from workflows.models import NodeRun, WorkflowRun

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


@handler("expiry.mark")
def mark(ctx, payload):
    """Leaves a file behind: the proof the handler ran."""
    Path(payload["path"]).write_text("ran")


def _work(broker, settings) -> None:
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name}
    broker.promote()
    Worker(["default"], concurrency=2, using=broker.using, burst=True).serve()


def test_a_run_whose_expiry_passed_before_a_worker_took_it_never_runs(broker, settings,
                                                                       tmp_path):
    hour_ago = timezone.now() - timedelta(hours=1)
    late = services.create_job("expiry.mark", {"path": str(tmp_path / "late")},
                               run_at=hour_ago, expires_in_s=60, using=broker.using)
    fine = services.create_job("expiry.mark", {"path": str(tmp_path / "fine")},
                               run_at=hour_ago, expires_in_s=86_400, using=broker.using)
    expired = []
    signals.run_expired.connect(lambda **kw: expired.append(kw["run_id"]), weak=False)
    try:
        _work(broker, settings)
    finally:
        signals.run_expired.receivers.clear()

    gone = Run.objects.using(broker.using).get(job=late)
    assert gone.state == RunState.EXPIRED and gone.attempt == 0
    deadline = gone.scheduled_at + timedelta(seconds=60)
    assert gone.error == f"expired: not started by its expiry, " \
                         f"{deadline:%Y-%m-%dT%H:%M:%S.%fZ}"
    assert gone.finished_at >= deadline
    assert not Attempt.objects.using(broker.using).filter(run=gone).exists()
    assert not (tmp_path / "late").exists()
    assert expired == [gone.pk]
    assert Run.objects.using(broker.using).get(job=fine).state == RunState.SUCCEEDED
    assert (tmp_path / "fine").read_text() == "ran"
    # Counted: the throughput by outcome (/metrics, run stats) and scheduler_runs_total.
    counted = stats.finished_counts(broker.using, deadline)
    assert sum(by_outcome["expired"] for by_outcome in counted.values()) == 1
    outcomes.flush_counts(broker.using)
    assert ("default", "expired", 1) in outcomes.counts(broker.using)


def test_an_absolute_expires_at_that_passed_expires_the_run(broker, settings, tmp_path):
    job = services.create_job("expiry.mark", {"path": str(tmp_path / "x")},
                              expires_at=timezone.now() + timedelta(hours=1),
                              using=broker.using)
    # The hour passes before any worker comes (the worker's clock is not asked).
    type(job).objects.using(broker.using).filter(pk=job.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1))

    _work(broker, settings)

    assert Run.objects.using(broker.using).get(job=job).state == RunState.EXPIRED
    assert not (tmp_path / "x").exists()


def test_a_cron_jobs_runs_expire_each_from_its_own_occurrence(broker, settings, tmp_path):
    job = services.create_job("expiry.mark", {"path": str(tmp_path / "cron")},
                              cron="* * * * *", expires_in_s=300, using=broker.using)
    now = timezone.now()
    old, fresh = Run.objects.using(broker.using).bulk_create([
        Run(job=job, scheduled_at=at, run_at=at, queue="default")
        for at in (now - timedelta(minutes=10), now - timedelta(minutes=1))])
    broker.push(run_refs(Run.objects.using(broker.using).filter(pk__in=[old.pk, fresh.pk])))

    _work(broker, settings)

    assert Run.objects.using(broker.using).get(pk=old.pk).state == RunState.EXPIRED
    assert Run.objects.using(broker.using).get(pk=fresh.pk).state == RunState.SUCCEEDED


def test_a_workflow_node_whose_run_expired_fails_its_downstream(broker, settings):
    workflow = workflows.create_workflow(
        "expiring", [{"name": "a", "handler": "noop", "expires_in_s": 60},
                     {"name": "b", "handler": "noop"}], [["a", "b"]], using=broker.using)
    workflow_run = workflows.start_workflow_run(workflow, using=broker.using)
    node_a = NodeRun.objects.using(broker.using).get(workflow_run=workflow_run,
                                                     node__name="a")
    type(node_a.node.job).objects.using(broker.using).filter(pk=node_a.node.job_id).update(
        expires_at=timezone.now() - timedelta(seconds=1))

    _work(broker, settings)

    states = dict(NodeRun.objects.using(broker.using).filter(workflow_run=workflow_run)
                  .values_list("node__name", "state"))
    assert states == {"a": "failed", "b": "upstream_failed"}
    assert NodeRun.objects.using(broker.using).get(pk=node_a.pk).error.startswith(
        "its run expired: not started by its expiry")
    assert WorkflowRun.objects.using(broker.using).get(pk=workflow_run.pk).state == "failed"


@pytest.mark.parametrize(("fields", "field", "message"), [
    ({"cron": "@daily", "expires_at": "2030-01-01T00:00:00Z"}, "expires_at",
     "applies to one-off jobs only"),
    ({"run_at": "2030-01-02T00:00:00Z", "expires_at": "2030-01-01T00:00:00Z"},
     "expires_at", "must be after the run's time"),
    # No run_at: the run is due now (or after delay_s), so a past expiry could never hold.
    ({"expires_at": "2026-01-01T00:00:00Z"}, "expires_at", "must be after the run's time"),
    ({"delay_s": 7200, "expires_at": "2099-01-01T00:00:00Z"}, None, None),
    ({"expires_at": "2030-01-01T00:00:00Z", "expires_in_s": 5}, "expires_in_s",
     "give at most one of expires_at or expires_in_s"),
    ({"expires_in_s": 0}, "expires_in_s", "greater than or equal to 1"),
    ({"retry": {"kind": "random"}}, "retry", "kind: give one of"),
    ({"retry": {"never_retry_on": [1]}}, "retry", "is not a class name"),
])
def test_rest_answers_a_bad_value_with_a_400_naming_the_field(api, fields, field, message):
    answer = api.post("/api/jobs/", {"handler": "noop", **fields}, format="json")

    if field is None:  # a good value among the bad, so the check is not "always refuse"
        assert answer.status_code == 201, answer.content
        return
    assert answer.status_code == 400, answer.content
    assert message in answer.json()[field][0]


def test_rest_and_create_jobs_store_and_show_the_fields(api):
    strategy = {"kind": "linear", "base_s": 5, "never_retry_on": ["KeyError"]}
    answer = api.post("/api/jobs/", {"handler": "noop", "cron": "@hourly", "retry": strategy,
                                     "expires_in_s": 600}, format="json")
    assert answer.status_code == 201, answer.content
    shown = answer.json()
    assert (shown["retry"], shown["expires_in_s"]) == ({**strategy, "base_s": 5.0}, 600)

    made = services.create_jobs([{"handler": "noop", "retry": strategy,
                                  "expires_at": timezone.now() + timedelta(hours=1)},
                                 {"handler": "noop", "cron": "@daily", "expires_in_s": 60}])
    one_off, cron_job = made
    assert one_off.retry["kind"] == "linear" and one_off.expires_at is not None
    assert cron_job.expires_in_s == 60


def test_a_one_off_cannot_be_moved_past_its_expiry(api):
    made = api.post("/api/jobs/", {"handler": "noop", "run_at": "2030-01-01T00:00:00Z",
                                   "expires_at": "2030-06-01T00:00:00Z"}, format="json")
    assert made.status_code == 201, made.content
    url = f"/api/jobs/{made.json()['id']}/"

    moved = api.patch(url, {"run_at": "2031-01-01T00:00:00Z"}, format="json")

    assert moved.status_code == 400, moved.content
    assert "must be before the job's expires_at" in moved.json()["run_at"][0]
    assert api.get(url).json()["run_at"].startswith("2030-01-01")
    assert api.patch(url, {"run_at": "2030-02-01T00:00:00Z"},
                     format="json").status_code == 200
