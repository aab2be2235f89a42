"""Exactly once, however the races go, on every broker/database pair (docs/workflows.md,
"The rules" and "Nothing lost"): two workers acking a node's two upstreams at the same
moment create its run once; schedulers racing over a cron workflow start one workflow run
per occurrence; the reconcile repairs a node whose run's outcome the engine was never
told of."""

import threading
from datetime import timedelta

import pytest
from django.db import connections

from runs.clock import db_now
from runs.execution import hooks
from runs.models import AttemptOutcome, Run
from runs.types import Outcome
from tests.conftest import wait_until
from tests.test_workflows_engine import drain, node, states
from workflows import services
from workflows.models import NodeRun, Workflow, WorkflowRun
from workflows.reconcile import reconcile
from workflows.ticks import start_scheduled

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


@pytest.fixture
def pair(broker, settings):
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name,
                          "RETRY_BACKOFF_BASE_S": 0.05}
    return broker


def lease_all(broker, count: int) -> list:
    leases = []

    def more():
        broker.promote()
        leases.extend(broker.lease(["default"], count - len(leases), "racer"))
        return len(leases) >= count

    wait_until(more, timeout=30, interval=0.05, message=f"{count} leases")
    return leases


def race(*calls) -> list[Exception]:
    """Run ``calls`` at once, each in a thread of its own (its own database connection),
    released together by a barrier; returns what they raised."""
    barrier = threading.Barrier(len(calls))
    errors = []

    def run(call):
        try:
            barrier.wait()
            call()
        except Exception as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(call,)) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return errors


@pytest.mark.slow
def test_two_upstreams_acked_at_once_create_the_downstream_run_once(pair):
    rounds = 12
    wf = services.create_workflow("fan-in", [node("left"), node("right"), node("join")],
                                  [["left", "join"], ["right", "join"]], using=pair.using)
    runs = [services.start_workflow_run(wf, using=pair.using) for _ in range(rounds)]
    leases = lease_all(pair, 2 * rounds)
    of_run = dict(NodeRun.objects.using(pair.using).filter(run_id__isnull=False)
                  .values_list("run_id", "workflow_run_id"))
    by_workflow_run: dict[int, list] = {}
    for lease in leases:
        by_workflow_run.setdefault(of_run[lease.run_id], []).append(lease)

    for pair_of_leases in by_workflow_run.values():
        errors = race(*[
            (lambda lease=lease: pair.complete([Outcome(lease, AttemptOutcome.SUCCEEDED,
                                                        result={"n": lease.run_id})]))
            for lease in pair_of_leases])
        assert errors == []

    join = wf.nodes.using(pair.using).get(name="join")
    for workflow_run in runs:
        view = services.get_workflow_run(workflow_run.pk, using=pair.using)
        assert states(view) == {"left": "succeeded", "right": "succeeded", "join": "running"}
        assert Run.objects.using(pair.using).filter(
            job_id=join.job_id, scheduled_at=workflow_run.scheduled_at).count() == 1
    assert Run.objects.using(pair.using).filter(job_id=join.job_id).count() == rounds
    assert {drain(pair, r)["state"] for r in runs} == {"succeeded"}


@pytest.mark.slow
def test_schedulers_racing_start_one_workflow_run_per_occurrence(pair):
    wfs = [services.create_workflow(f"cron{i}", [node("a"), node("b")], [["a", "b"]],
                                    schedule={"cron": "* * * * *", "misfire_policy": "run_all"},
                                    using=pair.using) for i in range(5)]
    start = (db_now(pair.using) - timedelta(minutes=6)).replace(second=0, microsecond=0)
    Workflow.objects.using(pair.using).update(next_run_at=start)

    errors = race(*[lambda: start_scheduled([0], 1, pair.using) for _ in range(3)])
    now = db_now(pair.using)
    assert errors == []

    def made():
        return set(WorkflowRun.objects.using(pair.using).values_list("workflow_id",
                                                                     "scheduled_at"))

    before = made()
    for wf in wfs:
        times = sorted(t for w, t in before if w == wf.pk)
        # Every occurrence from the first missed one to the lookahead's horizon, once.
        assert times[0] == start and times[-1] <= now + timedelta(seconds=10)
        assert times == [start + timedelta(minutes=m) for m in range(len(times))]
        assert times[-1] + timedelta(minutes=1) > now - timedelta(seconds=10)
    # A scheduler that claimed with a stale next_run_at (its lease expired unnoticed)
    # tries every occurrence again: the unique (workflow, scheduled_at) refuses them (an
    # occurrence that has come within the lookahead since is new).
    Workflow.objects.using(pair.using).update(next_run_at=start)
    again = start_scheduled([0], 1, pair.using)[0]
    after = made()
    assert before <= after and len(after) == len(before) + again
    assert all(t > max(t for _, t in before) for _, t in after - before)
    assert {r.started_by for r in WorkflowRun.objects.using(pair.using)} == {"schedule"}
    # Each workflow run's first node has one run, the second waits.
    assert NodeRun.objects.using(pair.using).filter(node__name="a", state="running").count() \
        == WorkflowRun.objects.using(pair.using).count()
    assert Run.objects.using(pair.using).count() == WorkflowRun.objects.using(pair.using).count()


def test_a_paused_workflow_starts_nothing_on_its_schedule(pair):
    from workflows import control

    wf = services.create_workflow("cron", [node("a")], schedule="* * * * *", using=pair.using)
    assert control.pause_workflow(wf, using=pair.using)
    Workflow.objects.using(pair.using).update(next_run_at=db_now(pair.using))

    assert start_scheduled([0], 1, pair.using)[0] == 0
    with pytest.raises(services.SchedulerError, match="paused"):
        services.trigger(wf, using=pair.using)
    assert control.resume_workflow(wf, using=pair.using)
    assert Workflow.objects.using(pair.using).get(pk=wf.pk).next_run_at > db_now(pair.using)
    assert services.trigger(wf, using=pair.using).started_by == "trigger"


def test_the_reconcile_finishes_what_the_engine_was_not_told(pair, monkeypatch):
    wr = services.start_workflow_run(
        services.create_workflow("w", [node("a"), node("b"), node("bad", "wf.fail",
                                                                   max_attempts=1),
                                       node("after_bad")],
                                 [["a", "b"], ["bad", "after_bad"]], using=pair.using),
        using=pair.using)
    leases = lease_all(pair, 2)
    name_of = dict(NodeRun.objects.using(pair.using).filter(run_id__isnull=False)
                   .values_list("run_id", "node__name"))
    # The acks commit, but no listener hears of them (as if its savepoint had failed).
    monkeypatch.setattr(hooks, "_listeners", [])
    pair.complete([Outcome(lease, AttemptOutcome.SUCCEEDED if name_of[lease.run_id] == "a"
                           else AttemptOutcome.FAILED, error="boom") for lease in leases])
    monkeypatch.undo()
    stuck = services.get_workflow_run(wr.pk, using=pair.using)
    assert states(stuck) == {"a": "running", "b": "pending", "bad": "running",
                             "after_bad": "pending"}

    counts = reconcile(using=pair.using)

    assert counts["finished"] == 2
    view = services.get_workflow_run(wr.pk, using=pair.using)
    assert states(view) == {"a": "succeeded", "b": "running", "bad": "failed",
                            "after_bad": "upstream_failed"}
    assert reconcile(using=pair.using) == {"finished": 0, "started": 0, "ended": 0,
                                           "cancelled": 0}
    assert drain(pair, wr)["state"] == "failed"
    assert Run.objects.using(pair.using).count() == 3


def test_the_reconcile_gives_a_ready_node_its_lost_run(pair):
    wr = services.start_workflow_run(
        services.create_workflow("w", [node("a"), node("b")], [["a", "b"]], using=pair.using),
        using=pair.using)
    # As if the creation of a's run had been lost: the node is pending with no run.
    NodeRun.objects.using(pair.using).filter(node__name="a").update(state="pending",
                                                                    run_id=None)
    Run.objects.using(pair.using).all().delete()

    assert reconcile(using=pair.using)["started"] == 1

    assert drain(pair, wr)["state"] == "succeeded"
    assert Run.objects.using(pair.using).count() == 2
