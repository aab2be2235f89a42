"""A node that does not succeed, and its way back (docs/workflows.md, "Failure"): when a
node's run goes to the dead letter (or is cancelled), every node below it whose trigger
rule can no longer hold becomes ``upstream_failed`` at once, those whose rule now holds
(``all_done``, ``one_failed``, ...) start, the rest of the graph goes on where it can, and
the workflow run fails once nothing is left to run. Requeueing that run from the dead
letter (runs/services.py's requeue) brings the node back to ``running``, the nodes below
it back to ``pending`` and the workflow run back to ``running``. Each step runs inside
the transaction that changed the runs.
"""

from datetime import datetime

from django.db.models import Case, Value, When

from runs.models import Run
from workflows.execution import nesting
from workflows.execution.engine import finish_if_done, node_runs_of, settle
from workflows.graph import BLOCKING, propagate
from workflows.models import NodeRun, NodeState, WorkflowRun, WorkflowRunState

__all__ = ["BLOCKING", "nodes_failed", "nodes_requeued", "propagate", "revive"]

WHY = {NodeState.FAILED: "its run went to the dead letter",
       NodeState.CANCELLED: "its run was cancelled"}
CAUSE_MAX = 300  # characters of the run's last error line a failed node run repeats


def nodes_failed(run_ids: list[int], state: str, now: datetime, using: str) -> None:
    """The runs ``run_ids`` went dead (``state`` FAILED) or were cancelled (CANCELLED):
    their node runs take ``state``, the pending nodes below them whose rule can no
    longer hold are marked and those whose rule now holds start (engine.settle), and
    each workflow run concerned ends if nothing is left to run."""
    rows = node_runs_of(run_ids, [NodeState.RUNNING], using)
    if not rows:
        return
    running = NodeRun.objects.using(using).filter(pk__in=[r[0] for r in rows],
                                                  state=NodeState.RUNNING)
    if state == NodeState.FAILED:
        # The run's own last error, said where the node's state is read (the workflow
        # run's page and API), not one request further on.
        cause = dict(Run.objects.using(using).filter(pk__in=run_ids)
                     .values_list("pk", "error"))
        errors = [When(pk=node_run_id, then=Value(why_failed(cause.get(run_id, ""))))
                  for node_run_id, run_id in running.values_list("pk", "run_id")]
        running.update(state=state, finished_at=now,
                       error=Case(*errors, default=Value(WHY[state])))
    else:
        running.update(state=state, finished_at=now, error=WHY[state])
    workflow_runs = {r[1] for r in rows}
    settle(workflow_runs, {r[2] for r in rows}, now, using)
    finish_if_done(workflow_runs, now, using)


def why_failed(run_error: str) -> str:
    """A failed node run's error: WHY's, then the last line of its run's error (a
    traceback's last line is the exception), at most CAUSE_MAX characters of it."""
    lines = [line.strip() for line in (run_error or "").splitlines() if line.strip()]
    if not lines:
        return WHY[NodeState.FAILED]
    last = lines[-1]
    if len(last) > CAUSE_MAX:
        last = last[:CAUSE_MAX - 1] + "…"
    if last.startswith("expired: "):  # runs/execution/expiry.py: it never ran, nothing is dead
        return f"its run {last}"
    return f"{WHY[NodeState.FAILED]}: {last}"


def revived_node_runs(run_ids: list[int], using: str) -> list[tuple[int, int, int]]:
    """(node run id, workflow run id, run id) of the failed or cancelled node runs whose
    run is one of ``run_ids`` and whose workflow run is not cancelled: the node runs a
    requeue of those runs revives (nodes_requeued; workflows/execution/quota.py counts them)."""
    return list(NodeRun.objects.using(using)
                .filter(run_id__in=run_ids, state__in=BLOCKING)
                .exclude(workflow_run__state=WorkflowRunState.CANCELLED)
                .values_list("id", "workflow_run_id", "run_id"))


def nodes_requeued(run_ids: list[int], now: datetime, using: str) -> None:
    """The dead or cancelled runs ``run_ids`` went back to the queue: in each workflow run
    concerned that was not cancelled, their node runs are running again, the
    upstream_failed nodes go back to pending (those still below another failed node
    are marked again) and a failed workflow run is running again. A node run of a
    cancelled workflow run keeps its state: its run runs alone (docs/workflows.md,
    "Failure"); running again, the reconcile's sweep of a cancelled workflow run's live
    nodes cancelled the run within seconds of its requeue."""
    rows = revived_node_runs(run_ids, using)
    if rows:
        revive([(r[0], r[1]) for r in rows], now, using)


def revive(rows: list[tuple[int, int]], now: datetime, using: str) -> None:
    """Bring the failed or cancelled node runs ``rows`` ((node run id, workflow run id),
    of workflow runs not cancelled) back to running: nodes_requeued's body, also a
    mapped node's whose item was requeued (workflows/execution/items.py)."""
    revived = {r[1] for r in rows}
    NodeRun.objects.using(using).filter(pk__in=[r[0] for r in rows]).update(
        state=NodeState.RUNNING, finished_at=None, error="")
    NodeRun.objects.using(using).filter(workflow_run_id__in=revived,
                                        state=NodeState.UPSTREAM_FAILED).update(
        state=NodeState.PENDING, finished_at=None, error="")
    propagate(revived, now, using)
    back = list(WorkflowRun.objects.using(using).filter(
        pk__in=revived, state=WorkflowRunState.FAILED).values_list("pk", flat=True))
    WorkflowRun.objects.using(using).filter(pk__in=back,
                                            state=WorkflowRunState.FAILED).update(
        state=WorkflowRunState.RUNNING, finished_at=None, error="")
    # A child running again runs its parent's node again (docs/workflows.md,
    # "Sub-workflows").
    nesting.runs_revived(back, now, using)
