"""What a mapped node's item runs do to their node (docs/workflows.md, "Mapped nodes"):
each item's run is an ordinary run of the node's job; the node run is running while any
item runs, and once none does it ends ``succeeded`` if every item succeeded, else
``failed`` (an item went to the dead letter) or ``cancelled``. From there its downstream
nodes go on as below any node, by their trigger rules (engine.start_ready, settle), in
the same transaction as the item's ack, dead letter or cancel.

Exactly once: the items' states change first (their run rows are the ack's), then their
node runs are locked (FOR UPDATE, in id order) and the items counted in a statement of
its own, so of two last items acked at once the second to get the lock sees the first's
success. Lock order, as everywhere: runs, then node runs, then the workflow run; a
MapItem row is written only by the holder of its run's row.
"""

from datetime import datetime

from django.db.models import Count

from runs.models import Run
from workflows.execution.failures import WHY, revive, why_failed
from workflows.execution.node_ends import after_ended
from workflows.models import MapItem, NodeRun, NodeState, WorkflowRunState

DONE = (NodeState.SUCCEEDED, NodeState.FAILED, NodeState.CANCELLED)


def item_runs(run_ids: list[int], using: str) -> set[int]:
    """The ids (a set of ints) of the runs among ``run_ids`` that are a mapped node's
    items (docs/workflows.md, "Mapped nodes"); one query."""
    return set(MapItem.objects.using(using).filter(run_id__in=run_ids)
               .values_list("run_id", flat=True))


def items_finished(run_ids: list[int], state: str, now: datetime, using: str) -> None:
    """The runs ``run_ids`` ended in ``state`` (NodeState SUCCEEDED, FAILED or
    CANCELLED; ``now`` the database's time): those that are running items take it; each
    node run whose items are all done then ends (module docstring), and its workflow run
    goes on as after any node's end. A no-op for runs that are no item (one query). Runs
    inside the caller's transaction (an ack's, a cancel's, a reconcile's); raises what
    the database raises (docs/workflows.md, "Mapped nodes")."""
    moved = list(MapItem.objects.using(using).filter(run_id__in=run_ids,
                                                     state=NodeState.RUNNING)
                 .values_list("id", "node_run_id", "run_id"))
    if not moved:
        return
    MapItem.objects.using(using).filter(pk__in=[m[0] for m in moved]).update(
        state=state, finished_at=now)
    locked = list(NodeRun.objects.using(using)
                  .filter(pk__in={m[1] for m in moved}, state=NodeState.RUNNING)
                  .order_by("id").select_for_update()
                  .values_list("id", "workflow_run_id", "node_id"))
    if not locked:
        return
    counts: dict[int, dict[str, int]] = {}
    for node_run_id, item_state, n in (MapItem.objects.using(using)
                                       .filter(node_run_id__in=[r[0] for r in locked])
                                       .values("node_run_id", "state")
                                       .annotate(n=Count("pk"))
                                       .values_list("node_run_id", "state", "n")):
        counts.setdefault(node_run_id, {})[item_state] = n
    succeeded, ended = [], []
    for node_run_id, wr_id, node_id in locked:
        by_state = counts.get(node_run_id, {})
        if by_state.get(NodeState.RUNNING):
            continue
        outcome, error = _outcome(node_run_id, by_state, using)
        NodeRun.objects.using(using).filter(pk=node_run_id, state=NodeState.RUNNING).update(
            state=outcome, finished_at=now, error=error)
        (succeeded if outcome == NodeState.SUCCEEDED else ended).append((wr_id, node_id))
    after_ended(succeeded, ended, now, using)


def _outcome(node_run_id: int, by_state: dict[str, int], using: str) -> tuple[str, str]:
    """A mapped node run's end state and error once none of its items runs: succeeded
    when all did; else failed (an item failed) or cancelled, naming the first such item."""
    total = sum(by_state.values())
    bad = total - by_state.get(NodeState.SUCCEEDED, 0)
    if not bad:
        return NodeState.SUCCEEDED, ""
    state = NodeState.FAILED if by_state.get(NodeState.FAILED) else NodeState.CANCELLED
    first = (MapItem.objects.using(using).filter(node_run_id=node_run_id, state=state)
             .order_by("index").values_list("index", "run_id").first())
    cause = WHY[state]
    if state == NodeState.FAILED:
        cause = why_failed(Run.objects.using(using).filter(pk=first[1])
                           .values_list("error", flat=True).first() or "")
    return state, (f"{bad} of {total} items did not succeed; item {first[0]} "
                   f"(run {first[1]}): {cause}")


def items_requeued(run_ids: list[int], now: datetime, using: str) -> None:
    """The dead or cancelled item runs ``run_ids`` went back to the queue: they run
    again, and their node run, if it had ended failed or cancelled in a workflow run not
    cancelled, runs again with the nodes below it pending (failures.revive;
    docs/workflows.md, "Mapped nodes"). Inside the requeue's transaction."""
    moved = list(MapItem.objects.using(using)
                 .filter(run_id__in=run_ids, state__in=(NodeState.FAILED, NodeState.CANCELLED))
                 .exclude(node_run__workflow_run__state=WorkflowRunState.CANCELLED)
                 .values_list("id", "node_run_id"))
    if not moved:
        return
    MapItem.objects.using(using).filter(pk__in=[m[0] for m in moved]).update(
        state=NodeState.RUNNING, finished_at=None)
    rows = list(NodeRun.objects.using(using)
                .filter(pk__in={m[1] for m in moved},
                        state__in=(NodeState.FAILED, NodeState.CANCELLED))
                .values_list("id", "workflow_run_id"))
    if rows:
        revive(rows, now, using)
