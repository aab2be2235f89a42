"""The workflow reconcile (docs/workflows.md, "Nothing lost"): the ack's transaction
starts the downstream nodes, but a listener error rolled back to its savepoint, a run
changed by a path that tells no listener (a job cancelled, a run discarded), or a bug,
would leave a workflow run waiting for ever. Every WORKFLOW_RECONCILE_S each scheduler
compares the live workflow runs of its partitions with their runs, and does what the
hooks would have done:

* a running node whose run succeeded, died or was cancelled takes that outcome (and its
  downstream nodes start, or become upstream_failed); one whose run is gone (deleted)
  fails;
* a pending node whose trigger rule holds gets its run (a running workflow run); one
  whose rule can no longer hold is marked ``upstream_failed`` or ``skipped``;
* a workflow run none of whose nodes can progress ends;
* the runs still live of a cancelled workflow run are cancelled (one made by a resume in
  the instant of a cancel that raced three times, workflows/control.py);
* a sub-workflow node whose child ended takes its end, and a live child of a cancelled
  workflow run is cancelled (workflows/execution/subflows.py).

Runs whose push to the broker was lost are the dispatcher's reconcile's (the runs table
is the truth, docs/architecture.md, "Invariants" 2).
"""

import logging

from django.db import transaction
from django.db.models import F

from runs import services as run_services
from runs.clock import db_now
from runs.models import TERMINAL_STATES, Run, RunState
from workflows import control
from workflows.execution import rules, subflows
from workflows.execution.ack import nodes_succeeded
from workflows.execution.engine import finish_if_done, start_ready
from workflows.execution.failures import BLOCKING, nodes_failed, propagate
from workflows.execution.items import items_finished
from workflows.models import (
    LIVE_WORKFLOW_STATES,
    MapItem,
    NodeRun,
    NodeState,
    WorkflowRun,
    WorkflowRunState,
)

BATCH = 500  # workflow runs reconciled per transaction
log = logging.getLogger("scheduler.workflows")


def in_partitions(queryset, partitions: list[int] | None, total: int, field: str = "id"):
    """The rows of ``queryset`` whose ``field`` falls in ``partitions`` (of ``total``;
    None: every row)."""
    if partitions is None or len(partitions) >= total:
        return queryset
    return queryset.alias(part=F(field) % total).filter(part__in=partitions)


def reconcile(partitions: list[int] | None = None, total: int = 1,
              using: str = "default") -> dict[str, int]:
    """Reconcile the live workflow runs whose workflow falls in ``partitions`` (of
    ``total``; None: all), in batches of BATCH, each its own transaction. Returns counts
    of what it repaired: ``finished`` (node runs given their run's outcome), ``started``
    (node runs given a run), ``ended`` (workflow runs ended), ``cancelled`` (stray runs).
    A batch that raises is done again one workflow run at a time; a run that still
    raises is logged and left for the next reconcile, never holding up the others."""
    live = WorkflowRun.objects.using(using).filter(state__in=LIVE_WORKFLOW_STATES)
    live = in_partitions(live, partitions, total, "workflow_id")
    counts = {"finished": 0, "started": 0, "ended": 0, "cancelled": 0}
    last = 0
    while True:
        batch = list(live.filter(pk__gt=last).order_by("pk").values_list("pk", flat=True)[:BATCH])
        if not batch:
            break
        last = batch[-1]
        try:
            _reconcile_runs(batch, counts, using)
        except Exception:  # noqa: BLE001 - logged; the other runs of the batch go on
            # One workflow run that cannot be repaired (a bug, a tenant's odd graph)
            # must not hold up every other tenant's: each alone, the failing ones
            # logged and left for the next reconcile.
            for pk in batch:
                try:
                    _reconcile_runs([pk], counts, using)
                except Exception:  # noqa: BLE001 - logged, retried at the next reconcile
                    log.exception("workflow reconcile: workflow run %s not repaired", pk)
    counts["cancelled"] = _cancel_strays(partitions, total, using)
    counts["cancelled"] += _cancel_orphans(partitions, total, using)
    return counts


def _reconcile_runs(batch: list[int], counts: dict[str, int], using: str) -> None:
    """Reconcile the workflow runs of ``batch``, adding to ``counts`` only once all is
    committed."""
    mine = dict.fromkeys(counts, 0)
    # Sub-workflow nodes whose child ended untold, in a transaction of their own: it
    # locks their node runs before the nodes below them, as a child's ack does.
    with transaction.atomic(using=using):
        found = subflows.reconcile(batch, db_now(using), using)
    counts["finished"] += found
    with transaction.atomic(using=using):
        _reconcile_batch(batch, mine, using)
    for key, value in mine.items():
        counts[key] += value


def _cancel_orphans(partitions, total: int, using: str) -> int:
    """Cancel the live child workflow runs (of the workflows in ``partitions``) whose
    parent workflow run was cancelled: a cancel cancels them after its own commit, and
    a crash between the two left them (workflows/execution/subflows.py). Returns how many."""
    parents = NodeRun.objects.using(using).filter(
        workflow_run__state=WorkflowRunState.CANCELLED, child_run_id__isnull=False)
    orphans = in_partitions(WorkflowRun.objects.using(using).filter(
        state__in=LIVE_WORKFLOW_STATES, pk__in=parents.values("child_run_id")),
        partitions, total, "workflow_id")
    return sum(control.cancel_workflow_run(pk, using)
               for pk in orphans.order_by("pk").values_list("pk", flat=True)[:BATCH])


def _reconcile_batch(batch: list[int], counts: dict[str, int], using: str) -> None:
    now = db_now(using)
    running = set(NodeRun.objects.using(using).filter(
        workflow_run_id__in=batch, state=NodeState.RUNNING, run_id__isnull=False)
        .values_list("run_id", flat=True))
    # A mapped node's items' runs too (docs/workflows.md, "Mapped nodes"): each event
    # below is told to the plain nodes and the items alike, as the listener does.
    running |= set(MapItem.objects.using(using).filter(
        node_run__workflow_run_id__in=batch, state=NodeState.RUNNING)
        .values_list("run_id", flat=True))
    # Locked, in id order as every path takes runs: a requeue waiting on one sees the
    # node's new state once this commits (failures.nodes_requeued).
    ended = dict(Run.objects.using(using).filter(pk__in=list(running),
                                                 state__in=TERMINAL_STATES)
                 .order_by("pk").select_for_update().values_list("pk", "state"))
    gone = set(running) - set(Run.objects.using(using).filter(pk__in=list(running))
                              .values_list("pk", flat=True))
    by_state: dict[str, list[int]] = {}
    for run_id, state in ended.items():
        by_state.setdefault(state, []).append(run_id)
    if by_state.get(RunState.SUCCEEDED):
        nodes_succeeded(by_state[RunState.SUCCEEDED], now, using)
        items_finished(by_state[RunState.SUCCEEDED], NodeState.SUCCEEDED, now, using)
    failed = by_state.get(RunState.DEAD, []) + by_state.get(RunState.EXPIRED, [])
    if failed:
        nodes_failed(failed, NodeState.FAILED, now, using)
        items_finished(failed, NodeState.FAILED, now, using)
    if by_state.get(RunState.CANCELLED):
        nodes_failed(by_state[RunState.CANCELLED], NodeState.CANCELLED, now, using)
        items_finished(by_state[RunState.CANCELLED], NodeState.CANCELLED, now, using)
    if gone:
        NodeRun.objects.using(using).filter(run_id__in=gone, state=NodeState.RUNNING).update(
            state=NodeState.FAILED, finished_at=now, error="its run no longer exists")
        items_finished(list(gone), NodeState.FAILED, now, using)
    counts["finished"] += len(ended) + len(gone)
    counts["started"] += len(start_ready(batch, now, using))
    # Where a pending node's rule may no longer hold (workflows/execution/rules.py): below a
    # failure or a skip, or a rule a success can make fail. What a mark makes ready
    # starts.
    pending = NodeRun.objects.using(using).filter(workflow_run_id__in=batch,
                                                  state=NodeState.PENDING)
    stuck = set(NodeRun.objects.using(using).filter(
        workflow_run_id__in=pending.values("workflow_run_id"),
        state__in=(*BLOCKING, NodeState.SKIPPED)).values_list("workflow_run_id", flat=True))
    stuck |= set(pending.filter(node__trigger_rule__in=rules.KILLED_BY_SUCCESS)
                 .values_list("workflow_run_id", flat=True))
    if stuck and propagate(stuck, now, using):
        counts["started"] += len(start_ready(stuck, now, using))
    counts["ended"] += len(finish_if_done(batch, now, using))


def _cancel_strays(partitions, total: int, using: str) -> int:
    """Cancel the live runs of the nodes of cancelled workflow runs (found through the
    node runs' partial index of live rows, which stays small)."""
    with transaction.atomic(using=using):
        cancelled = in_partitions(WorkflowRun.objects.using(using).filter(
            state=WorkflowRunState.CANCELLED), partitions, total, "workflow_id")
        run_ids = [r for r in NodeRun.objects.using(using).filter(
            workflow_run__in=cancelled.values("pk"), state=NodeState.RUNNING)
            .values_list("run_id", flat=True)[:BATCH] if r is not None]
        run_ids += MapItem.objects.using(using).filter(
            node_run__workflow_run__in=cancelled.values("pk"), state=NodeState.RUNNING,
        ).values_list("run_id", flat=True)[:BATCH]
        if not run_ids:
            return 0
        return run_services.cancel(run_ids, using)
