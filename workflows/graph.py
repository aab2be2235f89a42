"""Walks down a workflow's graph (docs/workflows.md, "Failure" and "Trigger rules"): the
pending nodes whose trigger rule can no longer hold will not run. They become
``upstream_failed`` when a failure decided it, else ``skipped`` (workflows/execution/rules.py)."""

from datetime import datetime
from graphlib import TopologicalSorter

from workflows.execution import rules
from workflows.models import NodeRun, NodeState, WorkflowEdge

# A node run in one of these states failed by its own run.
BLOCKING = (NodeState.FAILED, NodeState.CANCELLED)


def _upstreams(workflow_ids, using: str) -> dict[int, list[int]]:
    ups: dict[int, list[int]] = {}
    for upstream, downstream in (WorkflowEdge.objects.using(using)
                                 .filter(workflow_id__in=list(workflow_ids))
                                 .order_by("upstream_id")
                                 .values_list("upstream_id", "downstream_id")):
        ups.setdefault(downstream, []).append(upstream)
    return ups


def propagate(workflow_run_ids, now: datetime, using: str) -> set[int]:
    """In each of ``workflow_run_ids``, mark every pending node whose trigger rule can no
    longer hold (rules.verdict), in topological order, so a mark counts for the nodes
    below it in the same call. ``error`` names why: for upstream_failed the failed or
    cancelled node that decided it (through upstream_failed nodes). Returns the ids of
    the nodes marked in any of them (their downstream may now be ready)."""
    rows = list(NodeRun.objects.using(using).filter(workflow_run_id__in=list(workflow_run_ids))
                .values_list("id", "workflow_run_id", "node_id", "node__name", "state",
                             "node__trigger_rule", "workflow_run__workflow_id"))
    if not rows:
        return set()
    ups = _upstreams({r[6] for r in rows}, using)
    by_run: dict[int, dict[int, list]] = {}
    for row in rows:
        by_run.setdefault(row[1], {})[row[2]] = list(row)
    marked: dict[tuple[str, str], list[int]] = {}
    nodes_marked: set[int] = set()
    for nodes in by_run.values():
        if not any(row[4] == NodeState.PENDING for row in nodes.values()):
            continue
        order = TopologicalSorter({n: ups.get(n, []) for n in nodes}).static_order()
        origin: dict[int, tuple[str, str]] = {}  # node -> (failed node's name, how)
        for node_id in order:
            row = nodes.get(node_id)
            if row is None:
                continue
            above = [nodes[u] for u in ups.get(node_id, ()) if u in nodes]
            if row[4] in BLOCKING:
                origin[node_id] = (row[3], row[4])
            elif row[4] == NodeState.UPSTREAM_FAILED:
                origin[node_id] = next((origin[u[2]] for u in above if u[2] in origin),
                                       (row[3], NodeState.FAILED))
            if row[4] != NodeState.PENDING:
                continue
            fate = rules.verdict(row[5], [u[4] for u in above])
            if fate not in (NodeState.UPSTREAM_FAILED, NodeState.SKIPPED):
                continue
            row[4] = fate
            why = _why(fate, row[5], above, origin)
            if fate == NodeState.UPSTREAM_FAILED:
                origin[node_id] = next(origin[u[2]] for u in above if u[2] in origin)
            marked.setdefault((fate, why), []).append(row[0])
            nodes_marked.add(node_id)
    for (fate, why), ids in marked.items():
        NodeRun.objects.using(using).filter(pk__in=ids, state=NodeState.PENDING).update(
            state=fate, finished_at=now, error=why)
    return nodes_marked


def _why(fate: str, rule: str, above: list, origin: dict) -> str:
    """A marked node run's ``error``: what made its rule fail."""
    suffix = "" if rule == rules.DEFAULT else f", so {rule} can no longer hold"
    if fate == NodeState.UPSTREAM_FAILED:
        name, how = next(origin[u[2]] for u in above if u[2] in origin)
        return f"upstream {name!r} {'failed' if how == NodeState.FAILED else how}{suffix}"
    if rule == rules.ONE_FAILED:
        return "no upstream failed, so one_failed can no longer hold"
    if rule == rules.ONE_SUCCESS:
        return "every upstream was skipped, so one_success can no longer hold"
    which = ((NodeState.SKIPPED,) if rule == rules.ALL_SUCCESS
             else (NodeState.SUCCEEDED, NodeState.SKIPPED))
    first = next(u for u in above if u[4] in which)
    how = "succeeded" if first[4] == NodeState.SUCCEEDED else "was skipped"
    return f"upstream {first[3]!r} {how}{suffix}"
