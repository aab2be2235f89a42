"""The history retention of workflow runs (docs/workflows.md, "History"): a workflow run
that has ended for good goes, with its node runs, once HISTORY_RETENTION_S has passed
since it finished, as runs do (runs/history/retention.py); without it the two tables grew by a
row per node per workflow run for ever (a 1,000-node workflow every minute: 1.4 M node
runs a day).

Ended for good: ``succeeded``, ``cancelled``, or ``failed`` with no node's run left dead
in the dead letter (a requeue of one would resume it, and the runs retention keeps its
nodes' runs for it: workflows/wiring.py's KEPT_RUNS), and not a child whose parent
workflow run is live. Run by each scheduler for the
workflows of its partitions, in the tick's reconcile (workflows/ticks.py).
"""

from django.db import transaction
from django.db.models import Exists, OuterRef

from runs.history.retention import cutoff
from runs.models import Run, RunState
from scheduler_core import conf
from workflows.models import LIVE_WORKFLOW_STATES, NodeRun, WorkflowRun, WorkflowRunState
from workflows.reconcile import in_partitions

BATCH = 100  # workflow runs deleted per transaction
ENDED = (WorkflowRunState.SUCCEEDED, WorkflowRunState.CANCELLED, WorkflowRunState.FAILED)


def prune_workflow_runs(partitions: list[int] | None = None, total: int = 1,
                        using: str = "default", limit: int = BATCH) -> int:
    """Delete at most ``limit`` workflow runs of the workflows in ``partitions`` (of
    ``total``; None: all) that ended for good before the retention's cutoff
    (HISTORY_RETENTION_S; nothing when it keeps everything), with their node runs, in
    one transaction. Rows another transaction holds are skipped. Returns how many
    workflow runs went (``limit``: there may be more)."""
    before = cutoff(conf.get("HISTORY_RETENTION_S"), using)
    if before is None:
        return 0
    dead = Exists(NodeRun.objects.filter(workflow_run_id=OuterRef("pk")).filter(
        Exists(Run.objects.filter(pk=OuterRef("run_id"), state=RunState.DEAD))))
    ended = WorkflowRun.objects.using(using).filter(
        state__in=ENDED, finished_at__lt=before).exclude(
        state=WorkflowRunState.FAILED, pk__in=WorkflowRun.objects.filter(dead).values("pk")
    ).exclude(pk__in=NodeRun.objects.filter(  # a child whose parent still runs: its
        # leaves' results are its parent's node's (docs/workflows.md, "Sub-workflows")
        workflow_run__state__in=LIVE_WORKFLOW_STATES, child_run_id__isnull=False)
        .values("child_run_id"))
    with transaction.atomic(using=using):
        ids = list(in_partitions(ended, partitions, total, "workflow_id").order_by("pk")
                   .select_for_update(skip_locked=True).values_list("pk", flat=True)[:limit])
        if not ids:
            return 0
        NodeRun.objects.using(using).filter(workflow_run_id__in=ids).delete()
        return WorkflowRun.objects.using(using).filter(pk__in=ids).delete()[1].get(
            WorkflowRun._meta.label, 0)
