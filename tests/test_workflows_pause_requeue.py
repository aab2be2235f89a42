"""A paused workflow run that fails while paused, then is revived by a requeue, on every
broker/database pair (docs/workflows.md, "Cancel and pause": a paused workflow run starts
no new node until resumed; "a requeue of a dead node's run while paused ... runs, and
what it makes ready waits for the resume")."""

import pytest

from runs import services as run_services
from runs.models import AttemptOutcome
from runs.types import Outcome
from tests.test_workflows_engine import node, start, states
from tests.test_workflows_races import lease_all, pair
from workflows import control, services

__all__ = ["pair"]  # the fixture, imported for its use here

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


def test_a_requeue_of_a_run_paused_then_failed_starts_nothing_before_the_resume(pair):
    wr = start(pair, [node("a", max_attempts=1), node("b")], [["a", "b"]])
    assert control.pause_workflow_run(wr, using=pair.using)
    [lease] = lease_all(pair, 1)
    pair.complete([Outcome(lease, AttemptOutcome.FAILED, error="boom", retry=False)])
    assert run_services.requeue([lease.run_id], using=pair.using)
    [again] = lease_all(pair, 1)

    pair.complete([Outcome(again, AttemptOutcome.SUCCEEDED, result={})])

    view = services.get_workflow_run(wr.pk, using=pair.using)
    assert (view["state"], states(view)) == ("paused", {"a": "succeeded", "b": "pending"})


def test_a_requeued_node_of_a_cancelled_workflow_run_runs_alone_to_its_end(pair):
    """docs/workflows.md, "Failure": a requeued run of a cancelled workflow run runs alone.
    The requeue set its node run back to running, and the reconcile's sweep of a cancelled
    workflow run's live nodes cancelled the run again within seconds (an adversary's
    finding). Its node keeps its state now, and the run ends as its handler says."""
    from runs.models import Run
    from workflows.reconcile import reconcile

    wr = start(pair, [node("a", max_attempts=1), node("b"), node("c")], [["a", "b"]])
    leases = lease_all(pair, 2)  # c still running keeps the workflow run live
    lease = next(x for x in leases if x.run_id == states_runs(wr, pair)["a"])
    pair.complete([Outcome(lease, AttemptOutcome.FAILED, error="boom", retry=False)])
    assert control.cancel_workflow_run(wr, using=pair.using)
    assert run_services.requeue([lease.run_id], using=pair.using)

    reconcile(using=pair.using)
    [again] = lease_all(pair, 1)
    reconcile(using=pair.using)
    pair.complete([Outcome(again, AttemptOutcome.SUCCEEDED, result={})])

    assert Run.objects.using(pair.using).get(pk=lease.run_id).state == "succeeded"
    view = services.get_workflow_run(wr.pk, using=pair.using)
    assert (view["state"], states(view)) == (
        "cancelled", {"a": "failed", "b": "upstream_failed", "c": "cancelled"})


def states_runs(wr, pair) -> dict[str, int]:
    """{node name: run id} of the workflow run ``wr``'s started nodes."""
    return {n["name"]: n["run_id"] for n in services.get_workflow_run(wr.pk, using=pair.using)[
        "nodes"] if n["run_id"] is not None}


def test_a_cancelled_workflow_stops_its_running_node_and_starts_nothing_after(pair):
    """control.cancel_workflow (docs/workflows.md, "Cancel and pause"): the node running
    when it is cancelled has its run cancelled, its ack then changes nothing, nothing below
    starts, and no start is taken again."""
    from jobs.models import Job
    from runs.models import Run
    from scheduler_core.exceptions import SchedulerError

    wr = start(pair, [node("a"), node("b")], [["a", "b"]])
    [lease] = lease_all(pair, 1)

    assert control.cancel_workflow(wr.workflow_id, using=pair.using)
    pair.complete([Outcome(lease, AttemptOutcome.SUCCEEDED, result={})])

    assert Run.objects.using(pair.using).get(pk=lease.run_id).state == "cancelled"
    view = services.get_workflow_run(wr.pk, using=pair.using)
    assert (view["state"], states(view)) == ("cancelled", {"a": "cancelled", "b": "cancelled"})
    assert set(Job.objects.using(pair.using).filter(workflow_node__workflow_id=wr.workflow_id)
               .values_list("status", flat=True)) == {"cancelled"}
    with pytest.raises(SchedulerError, match="cancelled: it starts no run again"):
        services.start_workflow_run(wr.workflow_id, using=pair.using)
    assert not control.cancel_workflow(wr.workflow_id, using=pair.using)
    assert not control.resume_workflow(wr.workflow_id, using=pair.using)
