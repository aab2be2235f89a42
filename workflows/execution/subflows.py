"""Sub-workflow nodes (docs/workflows.md, "Sub-workflows"): a node with ``"workflow"``
starts a run of that workflow (its child) once its trigger rule holds, and ends as the
child ends: ``succeeded``, ``failed`` or ``cancelled``, its downstream nodes then going on
by their trigger rules. The engine reaches these steps through workflows/execution/nesting.py.

Exactly once: the caller holds the pending node run's row lock (engine.start_ready); the
child is started in that transaction and the node run, read pending under that lock,
moves ``pending -> running`` with its ``child_run_id``, UNIQUE (child_run_id) and the
child's UNIQUE (workflow, scheduled_at) holding whatever happens. The child's end is told to the
parent in the transaction that ends the child (engine.finish_if_done, a cancel), so a
parent node never waits on a child that ended; the reconcile repairs one anyway.

Lock order: a child's rows before its parent's (a child's last ack locks the child's
runs, node runs and workflow run, then the parent's node run), and a sub-workflow node
run before the pending node runs of its workflow run (a cancel locks it as a node's
run, workflows/control.py). A cancel of a parent cancels its children after its own
commit, each in a transaction of its own.
"""

from collections import Counter
from datetime import datetime, timedelta

from django.db.models import Max

from runs import tracing
from workflows.execution import nesting
from workflows.execution import subflow_starts as starts
from workflows.execution.engine import settle, start_time
from workflows.execution.failures import revive
from workflows.execution.node_ends import after_ended
from workflows.execution.tracing import released
from workflows.models import (
    LIVE_WORKFLOW_STATES,
    NodeRun,
    NodeState,
    Workflow,
    WorkflowRun,
    WorkflowRunState,
)
from workflows.services import begin_run

# A child started alone (start_children's fallback) takes its parent node's time, or 1 µs
# after the latest run of its workflow within WINDOW of it (UNIQUE (workflow,
# scheduled_at)); SLOTS tries, each after another start took the instant, before the
# node fails.
SLOTS = 50
ERROR_MAX = 500  # characters of a child's error its parent node repeats


def start_children(rows: list[tuple], now: datetime, using: str,
                   running: set | None) -> list[int]:
    """Start a child workflow run for each ready sub-workflow node run of ``rows``
    (engine.start_ready's rows, the job's status left off, the last field the child
    workflow's id; each pending and locked by the caller), inside the caller's
    transaction. A refused child (ChildRefused: another owner's, not active, too deep,
    over max_pending, no free start time) fails its node with nothing started. Returns
    the node run ids started or ended, with those the ends started; ``running`` gets the
    workflow runs in which a node now runs.

    All of ``rows`` start together, in a fixed number of queries (subflow_starts.py);
    near the owner's max_pending, or when a start time was taken meanwhile, one at a
    time instead, each child counted before the next."""
    ids = [row[0] for row in rows]
    node_runs = {pk: (wr, node) for pk, wr, node in NodeRun.objects.using(using).filter(
        pk__in=ids, state=NodeState.PENDING).values_list("pk", "workflow_run_id", "node_id")}
    rows = [row for row in rows if row[0] in node_runs]
    # Locked as a start locks them, so a pause_workflow that returned is read here.
    workflows = {wf.pk: wf for wf in Workflow.objects.using(using).select_for_update()
                 .filter(pk__in={row[-1] for row in rows}).order_by("pk")}
    depth = starts.depths({wr for wr, _ in node_runs.values()}, using)
    nodes = starts.node_counts(workflows, using)
    admitted, failed = [], {}
    for row in rows:
        try:
            starts.check(workflows.get(row[-1]), row[11], depth[node_runs[row[0]][0]])
            admitted.append(row)
        except starts.ChildRefused as exc:
            failed[row[0]] = str(exc)
    # In an ack, a child's first runs continue the span of the upstream whose ack made
    # its node ready (workflows/execution/tracing.py); elsewhere the span current.
    traces = released([row[0] for row in admitted], using)
    children: dict[int, int] = {}
    new_pending = Counter()  # owner id: node runs to come (each node counted itself)
    for row in admitted:
        new_pending[row[11]] += max(nodes.get(row[-1], 0) - 1, 0)
    if starts.all_fit(new_pending, using):
        by_trace: dict = {}
        for row in admitted:
            by_trace.setdefault(traces.get(row[0]), []).append(row)
        for trace, group in by_trace.items():
            with tracing.continuing(trace):
                begun = starts.begin_many([(row[0], workflows[row[-1]],
                                            start_time(row, now)[0]) for row in group],
                                          now, using)
            children.update(begun or {})
    for row in admitted:
        if row[0] in children:
            continue
        try:
            starts.check_pending(workflows[row[-1]], row[11], nodes.get(row[-1], 0), using)
            with tracing.continuing(traces.get(row[0])):
                children[row[0]] = _begin(row[0], workflows[row[-1]],
                                          start_time(row, now)[0], now, using)
        except starts.ChildRefused as exc:
            failed[row[0]] = str(exc)
    if running is not None:
        running.update(node_runs[pk][0] for pk in children)
    for node_run_id, why in failed.items():
        NodeRun.objects.using(using).filter(pk=node_run_id, state=NodeState.PENDING).update(
            state=NodeState.FAILED, ready_at=now, finished_at=now, error=why)
    started = list(children)
    if failed:
        started += settle({node_runs[pk][0] for pk in failed},
                          {node_runs[pk][1] for pk in failed}, now, using, running)
    return started


def _begin(node_run_id: int, child_wf: Workflow, at: datetime, now: datetime,
           using: str) -> int:
    """Start a run of ``child_wf`` for node run ``node_run_id`` alone, at ``at`` or just
    after the latest run of the workflow within WINDOW from ``at`` (1 µs later), and
    point the node run at it; returns the child's id. ``now``: the database's time.
    Raises ChildRefused when WINDOW holds no free instant after SLOTS tries (other
    starts taking the same instants): a parent with hundreds of children of one
    workflow at one instant once tried them 1 µs apart and failed its whole ack."""
    runs = WorkflowRun.objects.using(using).filter(
        workflow=child_wf, scheduled_at__gte=at, scheduled_at__lt=at + starts.WINDOW)
    for _ in range(SLOTS):
        last = runs.aggregate(last=Max("scheduled_at"))["last"]
        slot = at if last is None else last + timedelta(microseconds=1)
        if slot >= at + starts.WINDOW:
            break
        child = begin_run(child_wf, slot, WorkflowRun.StartedBy.PARENT, None, now, using)
        if child is not None:
            NodeRun.objects.using(using).filter(pk=node_run_id, state=NodeState.PENDING) \
                .update(state=NodeState.RUNNING, child_run_id=child.pk, ready_at=now,
                        error="")
            if WorkflowRun.objects.using(using).filter(pk=child.pk).exclude(
                    state__in=LIVE_WORKFLOW_STATES).exists():
                runs_ended([child.pk], now, using)  # it ended at its start: no node ran
            return child.pk
    raise starts.ChildRefused(f"no free start time within "
                              f"{starts.WINDOW.total_seconds():g} s of {at.isoformat()} "
                              f"for a run of workflow {child_wf.pk}")


def runs_ended(workflow_run_ids: list[int], now: datetime, using: str) -> None:
    """The workflow runs ``workflow_run_ids`` ended: the running parent node run of each
    child among them takes its end (succeeded, failed naming the child's error, or
    cancelled), and the parent's downstream nodes go on by their trigger rules, in the
    caller's transaction (``now`` the database's time). A no-op (one query) for runs that
    are no child. Raises what the database raises (docs/workflows.md, "Sub-workflows")."""
    locked = list(NodeRun.objects.using(using)
                  .filter(child_run_id__in=list(workflow_run_ids), state=NodeState.RUNNING)
                  .order_by("id").select_for_update()
                  .values_list("id", "workflow_run_id", "node_id", "child_run_id"))
    if not locked:
        return
    children = {pk: (state, error) for pk, state, error in WorkflowRun.objects.using(using)
                .filter(pk__in=[r[3] for r in locked]).values_list("pk", "state", "error")}
    succeeded, ended = [], []
    for node_run_id, wr_id, node_id, child_id in locked:
        state, error = children.get(child_id, (WorkflowRunState.FAILED, "it is gone"))
        if state in LIVE_WORKFLOW_STATES:
            continue
        outcome = {WorkflowRunState.SUCCEEDED: NodeState.SUCCEEDED,
                   WorkflowRunState.CANCELLED: NodeState.CANCELLED}.get(state, NodeState.FAILED)
        why = "" if outcome == NodeState.SUCCEEDED else \
            f"its workflow run {child_id} {state}: {error}"[:ERROR_MAX]
        NodeRun.objects.using(using).filter(pk=node_run_id, state=NodeState.RUNNING).update(
            state=outcome, finished_at=now, error=why)
        (succeeded if outcome == NodeState.SUCCEEDED else ended).append((wr_id, node_id))
    after_ended(succeeded, ended, now, using)


def runs_revived(workflow_run_ids: list[int], now: datetime, using: str) -> None:
    """The failed workflow runs ``workflow_run_ids`` run again (a requeue of a dead node's
    run): the failed parent node run of each child among them runs again, in a parent
    workflow run not cancelled, with the nodes below it pending (failures.revive;
    docs/workflows.md, "Sub-workflows"). Inside the requeue's transaction; raises what
    the database raises."""
    rows = list(NodeRun.objects.using(using)
                .filter(child_run_id__in=list(workflow_run_ids), state=NodeState.FAILED)
                .exclude(workflow_run__state=WorkflowRunState.CANCELLED)
                .values_list("id", "workflow_run_id"))
    if rows:
        revive(rows, now, using)


def reconcile(workflow_run_ids: list[int], now: datetime, using: str) -> int:
    """The running sub-workflow node runs of ``workflow_run_ids`` whose child has ended
    take its end (runs_ended); returns how many children were told (an int). Inside the
    reconcile's transaction (workflows/reconcile.py; docs/workflows.md, "Nothing lost");
    raises what the database raises."""
    ended = list(WorkflowRun.objects.using(using).filter(
        pk__in=NodeRun.objects.using(using).filter(
            workflow_run_id__in=list(workflow_run_ids), state=NodeState.RUNNING,
            child_run_id__isnull=False).values("child_run_id"))
        .exclude(state__in=LIVE_WORKFLOW_STATES).values_list("pk", flat=True))
    if ended:
        runs_ended(ended, now, using)
    return len(ended)


def register() -> None:
    """Hand the engine these steps through workflows/execution/nesting.py; workflows/wiring.py
    calls it when Django starts."""
    nesting.register(start=start_children, ended=runs_ended, revived=runs_revived)
