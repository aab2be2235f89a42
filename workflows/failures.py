"""A node that does not succeed, and its way back (docs/workflows.md, "Failure"): when a
node's run goes to the dead letter (or is cancelled), every node below it that has not
run becomes ``upstream_failed`` at once, the rest of the graph goes on where it can, and
the workflow run fails once nothing is left to run. Requeueing that run from the dead
letter (runs/services.py's requeue) brings the node back to ``running``, the nodes below
it back to ``pending`` and the workflow run back to ``running``. Each step runs inside
the transaction that changed the runs.
"""

from collections import deque
from datetime import datetime

from workflows.engine import finish_if_done, node_runs_of
from workflows.models import NodeRun, NodeState, WorkflowEdge, WorkflowRun, WorkflowRunState

# A node run in one of these states holds up everything below it.
BLOCKING = (NodeState.FAILED, NodeState.CANCELLED)
WHY = {NodeState.FAILED: "its run went to the dead letter",
       NodeState.CANCELLED: "its run was cancelled"}


def nodes_failed(run_ids: list[int], state: str, now: datetime, using: str) -> None:
    """The runs ``run_ids`` went dead (``state`` FAILED) or were cancelled (CANCELLED):
    their node runs take ``state``, the pending nodes below them become upstream_failed,
    and each workflow run concerned ends if nothing is left to run."""
    rows = node_runs_of(run_ids, [NodeState.RUNNING], using)
    if not rows:
        return
    NodeRun.objects.using(using).filter(pk__in=[r[0] for r in rows],
                                        state=NodeState.RUNNING).update(
        state=state, finished_at=now, error=WHY[state])
    workflow_runs = {r[1] for r in rows}
    propagate(workflow_runs, now, using)
    finish_if_done(workflow_runs, now, using)


def _children(workflow_ids, using: str) -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for upstream, downstream in (WorkflowEdge.objects.using(using)
                                 .filter(workflow_id__in=list(workflow_ids))
                                 .values_list("upstream_id", "downstream_id")):
        children.setdefault(upstream, []).append(downstream)
    return children


def propagate(workflow_run_ids, now: datetime, using: str) -> int:
    """Mark ``upstream_failed`` every pending node below a failed or cancelled node in
    each of ``workflow_run_ids``, naming in ``error`` the nearest such upstream (a
    breadth-first walk down the edges). Returns how many node runs it marked."""
    rows = list(NodeRun.objects.using(using).filter(workflow_run_id__in=list(workflow_run_ids))
                .values_list("id", "workflow_run_id", "node_id", "node__name", "state",
                             "workflow_run__workflow_id"))
    if not rows:
        return 0
    children = _children({r[5] for r in rows}, using)
    by_run: dict[int, dict[int, tuple]] = {}
    for row in rows:
        by_run.setdefault(row[1], {})[row[2]] = row
    marked: dict[str, list[int]] = {}
    for nodes in by_run.values():
        reached: set[int] = set()
        queue = deque((node_id, row[3], row[4]) for node_id, row in nodes.items()
                      if row[4] in BLOCKING)
        while queue:
            node_id, origin, how = queue.popleft()
            for child in children.get(node_id, ()):
                row = nodes.get(child)
                if row is None or child in reached or row[4] != NodeState.PENDING:
                    continue
                reached.add(child)
                why = f"upstream {origin!r} {'failed' if how == NodeState.FAILED else how}"
                marked.setdefault(why, []).append(row[0])
                queue.append((child, origin, how))
    count = 0
    for why, ids in marked.items():
        count += NodeRun.objects.using(using).filter(pk__in=ids, state=NodeState.PENDING).update(
            state=NodeState.UPSTREAM_FAILED, finished_at=now, error=why)
    return count


def nodes_requeued(run_ids: list[int], now: datetime, using: str) -> None:
    """The dead or cancelled runs ``run_ids`` went back to the queue: their node runs are
    running again; in each workflow run concerned that was not cancelled, the
    upstream_failed nodes go back to pending (those still below another failed node
    are marked again) and a failed workflow run is running again."""
    rows = node_runs_of(run_ids, BLOCKING, using)
    if not rows:
        return
    NodeRun.objects.using(using).filter(pk__in=[r[0] for r in rows]).update(
        state=NodeState.RUNNING, finished_at=None, error="")
    revived = list(WorkflowRun.objects.using(using)
                   .filter(pk__in={r[1] for r in rows})
                   .exclude(state=WorkflowRunState.CANCELLED)
                   .values_list("pk", flat=True))
    if not revived:
        return
    NodeRun.objects.using(using).filter(workflow_run_id__in=revived,
                                        state=NodeState.UPSTREAM_FAILED).update(
        state=NodeState.PENDING, finished_at=None, error="")
    propagate(revived, now, using)
    WorkflowRun.objects.using(using).filter(pk__in=revived,
                                            state=WorkflowRunState.FAILED).update(
        state=WorkflowRunState.RUNNING, finished_at=None, error="")
