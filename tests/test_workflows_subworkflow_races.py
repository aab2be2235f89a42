"""Sub-workflow nodes under races, on every broker/database pair (docs/workflows.md,
"Sub-workflows", "Exactly once"): two upstreams acked at once start one child; many
parents' nodes ready at once, each naming the same workflow, start one child each at
distinct instants; a child's last ack racing its parent's cancel leaves nothing live and
no node run waiting."""

import pytest

from runs.models import AttemptOutcome, Run
from runs.types import Outcome
from tests.test_workflows_engine import drain, states
from tests.test_workflows_races import lease_all, race
from tests.test_workflows_subworkflows import child_of, child_workflow
from workflows import control, services
from workflows.models import LIVE_WORKFLOW_STATES, NodeRun, WorkflowRun

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


@pytest.fixture
def pair(broker, settings):
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name,
                          "RETRY_BACKOFF_BASE_S": 0.05}
    return broker


def succeed(broker, lease):
    return lambda: broker.complete([Outcome(lease, AttemptOutcome.SUCCEEDED,
                                            result={"n": lease.run_id})])


def test_two_upstreams_acked_at_once_start_one_child(pair):
    using, rounds = pair.using, 4
    child_workflow(using, queue="held")
    wf = services.create_workflow("fan-in", [
        {"name": "seed", "handler": "noop"}, {"name": "right", "handler": "noop"},
        {"name": "child", "workflow": "child"}], [["seed", "child"], ["right", "child"]],
        using=using)
    runs = [services.start_workflow_run(wf, using=using) for _ in range(rounds)]
    leases = lease_all(pair, 2 * rounds)
    of_run = dict(NodeRun.objects.using(using).filter(run_id__isnull=False)
                  .values_list("run_id", "workflow_run_id"))
    by_workflow_run: dict[int, list] = {}
    for lease in leases:
        by_workflow_run.setdefault(of_run[lease.run_id], []).append(lease)

    for both in by_workflow_run.values():
        assert race(*[succeed(pair, lease) for lease in both]) == []

    for wr in runs:
        assert states(services.get_workflow_run(wr.pk, using=using))["child"] == "running"
        assert child_of(using, wr).state == "running"
    assert WorkflowRun.objects.using(using).count() == 2 * rounds


def test_parents_ready_at_once_start_one_child_each(pair):
    using, parents = pair.using, 6
    child = child_workflow(using)
    wf = services.create_workflow("many", [
        {"name": "seed", "handler": "wf.sub.seed"}, {"name": "child", "workflow": "child"}],
        [["seed", "child"]], using=using)
    runs = [services.start_workflow_run(wf, using=using) for _ in range(parents)]
    leases = lease_all(pair, parents)

    assert race(*[succeed(pair, lease) for lease in leases]) == []

    children = WorkflowRun.objects.using(using).filter(workflow=child)
    assert children.count() == parents
    assert len(set(children.values_list("scheduled_at", flat=True))) == parents
    assert NodeRun.objects.using(using).filter(child_run_id__isnull=False).count() == parents
    assert {drain(pair, wr)["state"] for wr in runs} == {"succeeded"}


def test_a_childs_last_ack_racing_its_parents_cancel_leaves_nothing_live(pair):
    using, rounds = pair.using, 8
    child_workflow(using)
    wf = services.create_workflow("p", [
        {"name": "child", "workflow": "child"}, {"name": "after", "handler": "noop"}],
        [["child", "after"]], using=using)
    for _ in range(rounds):
        wr = services.start_workflow_run(wf, using=using)  # child is a root: started
        child = child_of(using, wr)
        [first] = lease_all(pair, 1)  # the child's double; then its inc, its last node
        succeed(pair, first)()
        [last] = lease_all(pair, 1)

        errors = race(succeed(pair, last), lambda wr=wr: control.cancel_workflow_run(
            wr, using=using))

        assert errors == []
        assert WorkflowRun.objects.using(using).get(pk=wr.pk).state == "cancelled"
        child_state = WorkflowRun.objects.using(using).get(pk=child.pk).state
        assert child_state in ("succeeded", "cancelled")
        node = NodeRun.objects.using(using).get(workflow_run=wr, node__name="child")
        assert node.state in ("succeeded", "cancelled")
        assert not WorkflowRun.objects.using(using).filter(
            state__in=LIVE_WORKFLOW_STATES).exists()
        assert not NodeRun.objects.using(using).filter(state__in=("pending", "running"),
                                                        workflow_run__state="cancelled"
                                                        ).exists()
        live = Run.objects.using(using).filter(state__in=("scheduled", "queued", "running",
                                                          "retrying"))
        assert not live.exists(), list(live.values("id", "state", "job__name"))
