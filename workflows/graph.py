"""Walks down a workflow's graph (docs/workflows.md, "Failure"): the nodes below one
that failed or was cancelled will not run."""

from collections import deque
from datetime import datetime

from workflows.models import NodeRun, NodeState, WorkflowEdge

# A node run in one of these states holds up everything below it.
BLOCKING = (NodeState.FAILED, NodeState.CANCELLED)


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
