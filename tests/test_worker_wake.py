"""An idle worker whose ack has just made runs ready (a workflow's downstream nodes, made
in the ack's transaction) leases at once instead of sleeping out WORKER_POLL_S
(runs/worker/acks.py; BENCHMARKS.md, "W7"). Seen through a burst worker, which stops once
it is idle with nothing in flight: before, its own ack's downstream run was left for the
next worker."""

import pytest

from jobs.registry import handler
from runs.worker import Worker
from workflows import services
from workflows.models import NodeRun, WorkflowRun

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


@handler("wake.noop")
def noop(ctx, payload):
    return None


def test_a_burst_worker_runs_the_downstream_node_its_own_ack_made_ready(broker, settings):
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name, "WORKER_POLL_S": 1}
    workflow = services.create_workflow(
        "two", [{"name": n, "handler": "wake.noop"} for n in ("a", "b", "c")],
        [["a", "b"], ["b", "c"]], using=broker.using)
    workflow_run = services.start_workflow_run(workflow, using=broker.using)
    broker.promote()

    Worker(["default"], concurrency=2, using=broker.using, burst=True).serve()

    states = dict(NodeRun.objects.using(broker.using).filter(workflow_run=workflow_run)
                  .values_list("node__name", "state"))
    assert states == {"a": "succeeded", "b": "succeeded", "c": "succeeded"}
    assert WorkflowRun.objects.using(broker.using).get(pk=workflow_run.pk).state == "succeeded"
