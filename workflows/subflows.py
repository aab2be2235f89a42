"""Sub-workflow nodes (docs/workflows.md, "Sub-workflows"): a node with ``"workflow"``
starts a run of that workflow (its child) once its trigger rule holds, and ends as the
child ends: ``succeeded``, ``failed`` or ``cancelled``, its downstream nodes then going on
by their trigger rules. The engine reaches these steps through workflows/nesting.py.

Exactly once: the caller holds the pending node run's row lock (engine.start_ready); the
child is started in that transaction and the node run moves ``pending -> running`` with
its ``child_run_id`` by a conditional UPDATE, UNIQUE (child_run_id) and the child's
UNIQUE (workflow, scheduled_at) holding whatever happens. The child's end is told to the
parent in the transaction that ends the child (engine.finish_if_done, a cancel), so a
parent node never waits on a child that ended; the reconcile repairs one anyway.

Lock order: a child's rows before its parent's (a child's last ack locks the child's
runs, node runs and workflow run, then the parent's node run), and a sub-workflow node
run before the pending node runs of its workflow run (a cancel locks it as a node's
run, workflows/control.py). A cancel of a parent cancels its children after its own
commit, each in a transaction of its own.
"""

from datetime import datetime, timedelta

from django.db.models import Max

from runs import tracing
from runs.tenancy.quotas import QuotaExceeded, bounds_of, check_quotas
from scheduler_core import conf
from workflows import nesting
from workflows.engine import settle, start_time
from workflows.failures import revive
from workflows.models import (
    LIVE_WORKFLOW_STATES,
    NodeRun,
    NodeState,
    Workflow,
    WorkflowNode,
    WorkflowRun,
    WorkflowRunState,
)
from workflows.node_ends import after_ended
from workflows.services import begin_run
from workflows.tracing import released

# A child's scheduled_at is its parent node's time, or 1 µs after the latest run of its
# workflow within WINDOW of it (UNIQUE (workflow, scheduled_at)); SLOTS tries, each after
# another start took the instant, before the node fails.
WINDOW = timedelta(seconds=1)
SLOTS = 50
ERROR_MAX = 500  # characters of a child's error its parent node repeats


class ChildRefused(Exception):
    """A sub-workflow node's child cannot start: ``str()`` says why (the node's error)."""


def depth_of(workflow_run_id: int, using: str) -> int:
    """How many parents workflow run ``workflow_run_id`` (an int) has, an int (0: started
    on its own), following each child's parent node run; stops past WORKFLOW_MAX_DEPTH
    (docs/workflows.md, "Sub-workflows"). Raises only what the database raises."""
    depth, current = 0, workflow_run_id
    while depth <= conf.get("WORKFLOW_MAX_DEPTH"):
        parent = (NodeRun.objects.using(using).filter(child_run_id=current)
                  .values_list("workflow_run_id", flat=True).first())
        if parent is None:
            return depth
        depth, current = depth + 1, parent
    return depth


def _check(child_wf: Workflow | None, owner_id: int | None, parent_wr: int,
           using: str) -> None:
    """Raise ChildRefused unless a sub-workflow node of ``owner_id`` (a user id or None)
    in workflow run ``parent_wr`` may start ``child_wf``: it exists, is the same owner's,
    is active, the nesting stays within WORKFLOW_MAX_DEPTH and its nodes fit the owner's
    ``max_pending`` (the start counted the node itself as one)."""
    if child_wf is None:
        raise ChildRefused("its workflow no longer exists; nothing was started")
    name = f"workflow {child_wf.pk} ({child_wf.name!r})"
    if child_wf.owner_id != owner_id:
        raise ChildRefused(f"{name} is another owner's: a node starts only its own "
                           "owner's workflows; nothing was started")
    if child_wf.status != Workflow.Status.ACTIVE:
        raise ChildRefused(f"{name} is {child_wf.status}: it starts no run; nothing was "
                           "started")
    limit = conf.get("WORKFLOW_MAX_DEPTH")
    if depth_of(parent_wr, using) + 1 > limit:
        raise ChildRefused(f"starting {name} would nest workflow runs more than "
                           f"WORKFLOW_MAX_DEPTH ({limit}) deep; nothing was started")
    nodes = WorkflowNode.objects.using(using).filter(workflow=child_wf).count()
    bounds = bounds_of(owner_id, using)
    if bounds is not None and nodes > 1:
        try:
            check_quotas(bounds, 0, nodes - 1, using)
        except QuotaExceeded as exc:
            raise ChildRefused(f"the {nodes} nodes of {name} would take the owner over "
                               f"max_pending: {exc}; nothing was started") from None


def start_children(rows: list[tuple], now: datetime, using: str,
                   running: set | None) -> list[int]:
    """Start a child workflow run for each ready sub-workflow node run of ``rows``
    (engine.start_ready's rows, the job's status left off, the last field the child
    workflow's id; each pending and locked by the caller), inside the caller's
    transaction. A refused child (ChildRefused: another owner's, not active, too deep,
    over max_pending, no free start time) fails its node with nothing started. Returns
    the node run ids started or ended, with those the ends started; ``running`` gets the
    workflow runs in which a node now runs."""
    started, failed = [], []
    # In an ack, a child's first runs continue the span of the upstream whose ack made
    # its node ready (workflows/tracing.py); elsewhere the span current.
    traces = released([row[0] for row in rows], using)
    for row in rows:
        node_run_id, owner_id, child_wf_id = row[0], row[11], row[-1]
        node_run = NodeRun.objects.using(using).filter(pk=node_run_id).values_list(
            "workflow_run_id", "state", "node_id").first()
        if node_run is None or node_run[1] != NodeState.PENDING:
            continue
        # Locked as a start locks it, so a pause_workflow that returned is read here.
        child_wf = (Workflow.objects.using(using).select_for_update()
                    .filter(pk=child_wf_id).first())
        try:
            _check(child_wf, owner_id, node_run[0], using)
            # A parent made ahead of its time (LOOKAHEAD_S, jitter) holds its child's
            # roots until then, as it holds a node's run.
            with tracing.continuing(traces.get(node_run_id)):
                child = _begin(child_wf, start_time(row, now)[0], now, using)
        except ChildRefused as exc:
            NodeRun.objects.using(using).filter(pk=node_run_id, state=NodeState.PENDING).update(
                state=NodeState.FAILED, ready_at=now, finished_at=now, error=str(exc))
            failed.append(node_run)
            continue
        NodeRun.objects.using(using).filter(pk=node_run_id, state=NodeState.PENDING).update(
            state=NodeState.RUNNING, child_run_id=child.pk, ready_at=now, error="")
        started.append(node_run_id)
        if running is not None:
            running.add(node_run[0])
        if WorkflowRun.objects.using(using).filter(pk=child.pk).exclude(
                state__in=LIVE_WORKFLOW_STATES).exists():
            runs_ended([child.pk], now, using)  # it ended at its start (no node could run)
    if failed:
        started += settle({f[0] for f in failed}, {f[2] for f in failed}, now, using, running)
    return started


def _begin(child_wf: Workflow, at: datetime, now: datetime, using: str) -> WorkflowRun:
    """A new run of ``child_wf`` started by a parent, at ``at`` or just after the latest
    run of the workflow within WINDOW from ``at`` (1 µs later); ``now`` the database's
    time. Raises ChildRefused when WINDOW holds no free instant after SLOTS tries (other
    starts taking the same instants): a parent with hundreds of children of one
    workflow at one instant once tried them 1 µs apart and failed its whole ack."""
    runs = WorkflowRun.objects.using(using).filter(
        workflow=child_wf, scheduled_at__gte=at, scheduled_at__lt=at + WINDOW)
    for _ in range(SLOTS):
        last = runs.aggregate(last=Max("scheduled_at"))["last"]
        slot = at if last is None else last + timedelta(microseconds=1)
        if slot >= at + WINDOW:
            break
        child = begin_run(child_wf, slot, WorkflowRun.StartedBy.PARENT, None, now, using)
        if child is not None:
            return child
    raise ChildRefused(f"no free start time within {WINDOW.total_seconds():g} s of "
                       f"{at.isoformat()} for a run of workflow {child_wf.pk}")


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
    """Hand the engine these steps through workflows/nesting.py; workflows/wiring.py
    calls it when Django starts."""
    nesting.register(start=start_children, ended=runs_ended, revived=runs_revived)
