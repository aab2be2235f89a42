"""What workflows hold of their owner's pending-runs quota, ``max_pending``
(docs/workflows.md, "Starts"): the nodes its live workflow runs will still make runs of,
and the nodes a requeue of a dead node's run brings back. A start is admitted for all of
a workflow's nodes at once and the engine then makes their runs without asking the quota
again, so every path that makes nodes pending again must count them as a start does."""

from django.db import models

from scheduler_core import conf
from workflows.execution.failures import BLOCKING, revived_node_runs
from workflows.models import (
    LIVE_WORKFLOW_STATES,
    MapItem,
    NodeRun,
    NodeState,
    WorkflowRun,
    WorkflowRunState,
)


def unmade_node_runs(bounds, using: str = "default") -> int:
    """How many node runs of the owner's live (running or paused) workflow runs are still
    pending, i.e. runs the engine will make without asking the quota again (a count; ``bounds``
    is the owner's runs.tenancy.quotas.Bounds)."""
    return NodeRun.objects.using(using).filter(
        workflow_run__workflow__owner_id=bounds.owner_id,
        workflow_run__state__in=LIVE_WORKFLOW_STATES, state=NodeState.PENDING).count()


def revived_by_requeue(run_ids: list[int], using: str) -> dict[int, int]:
    """{run id: node runs a requeue of it makes pending again}: for the failed or cancelled
    node runs of ``run_ids`` in workflow runs that are not cancelled, the upstream_failed
    node runs of their workflow run (failures.nodes_requeued), counted once per workflow
    run, at its lowest run id. An upper bound: those still below another failed node are
    marked again. Without it, a tenant at max_pending N requeued the dead roots of failed
    1-to-200 fan-outs, one run each by the count, 200 each in time (an adversary's
    finding: 984 pending runs at max_pending 300)."""
    first: dict[int, int] = {}
    # A mapped node's dead item revives its node run as a node's run does (items.py).
    items = (MapItem.objects.using(using)
             .filter(run_id__in=run_ids, state__in=BLOCKING, node_run__state__in=BLOCKING)
             .exclude(node_run__workflow_run__state=WorkflowRunState.CANCELLED)
             .values_list("node_run_id", "node_run__workflow_run_id", "run_id"))
    for run_id, workflow_run_id in sorted((r[2], r[1]) for r in [
            *revived_node_runs(run_ids, using), *items]):
        first.setdefault(workflow_run_id, run_id)
    if not first:
        return {}
    _parents_revived(first, using)
    counts = dict(NodeRun.objects.using(using)
                  .filter(workflow_run_id__in=list(first), state=NodeState.UPSTREAM_FAILED)
                  .values("workflow_run_id").annotate(n=models.Count("pk"))
                  .values_list("workflow_run_id", "n"))
    revived: dict[int, int] = {}
    for wr, run_id in first.items():
        if counts.get(wr):
            revived[run_id] = revived.get(run_id, 0) + counts[wr]
    return revived


def _parents_revived(first: dict[int, int], using: str) -> None:
    """Add to ``first`` ({workflow run id: run id}) the parents a revived child revives:
    a failed child running again runs its parent's failed sub-workflow node again, with
    the upstream_failed nodes below it (docs/workflows.md, "Sub-workflows"), up to
    WORKFLOW_MAX_DEPTH levels, each counted at its child's run id."""
    level = dict(first)
    for _ in range(conf.get("WORKFLOW_MAX_DEPTH")):
        failed = WorkflowRun.objects.using(using).filter(
            pk__in=list(level), state=WorkflowRunState.FAILED).values("pk")
        parents = list(NodeRun.objects.using(using)
                       .filter(child_run_id__in=failed, state=NodeState.FAILED)
                       .exclude(workflow_run__state=WorkflowRunState.CANCELLED)
                       .values_list("child_run_id", "workflow_run_id"))
        level = {parent: level[child] for child, parent in parents if parent not in first}
        if not level:
            return
        for parent, run_id in level.items():
            first[parent] = run_id
