"""Cancel, pause and resume of a workflow run, and cancel, pause and resume of a workflow
(docs/workflows.md, "Cancel and pause"). The REST API and the admin call these.

A paused workflow run starts no new node: the runs it has already made go on and finish
(as Airflow's paused DAGs let running tasks finish), and a node that becomes ready waits,
pending, for the resume. A paused workflow starts no run on its schedule; its runs
already started go on, and a resume starts from the next occurrence after it (the
occurrences of the pause are skipped, as a job's resume does by default).
"""

from django.db import transaction

from jobs.models import Job
from jobs.schedules import cron, zones
from runs import services as run_services
from runs.clock import db_now
from runs.models import PENDING_STATES, Run
from scheduler_core.exceptions import InvalidJob
from workflows.execution import nesting
from workflows.execution.engine import finish_if_done, start_ready
from workflows.models import (
    LIVE_WORKFLOW_STATES,
    MapItem,
    NodeRun,
    NodeState,
    Workflow,
    WorkflowNode,
    WorkflowRun,
    WorkflowRunState,
)


def _pk(obj) -> int:
    return obj.pk if hasattr(obj, "pk") else int(obj)


def _lock_pending(wr_id: int, using: str) -> None:
    """Lock the pending node runs of workflow run ``wr_id`` (FOR UPDATE, in id order, as
    an ack locks its candidates, engine.start_ready). A node gets its run only from a
    transaction holding its row's lock that reads the workflow run ``running`` after
    taking it; so a pause or resume holding these locks waits for every ack that could
    still make a run, and an ack that comes after reads the new state (docs/workflows.md,
    "Cancel and pause"). Node runs before the workflow run: the lock order everywhere."""
    list(NodeRun.objects.using(using).filter(workflow_run_id=wr_id, state=NodeState.PENDING)
         .order_by("id").select_for_update().values_list("id", flat=True))


def _running_run_ids(wr_id: int, using: str) -> set[int]:
    """The runs of workflow run ``wr_id``'s running nodes, a mapped node's items'
    included (docs/workflows.md, "Mapped nodes")."""
    return set(NodeRun.objects.using(using)
               .filter(workflow_run_id=wr_id, state=NodeState.RUNNING, run_id__isnull=False)
               .values_list("run_id", flat=True)) | set(
        MapItem.objects.using(using).filter(node_run__workflow_run_id=wr_id,
                                            state=NodeState.RUNNING)
        .values_list("run_id", flat=True))


def _lock_live_runs(wr_id: int, using: str) -> list[int]:
    """Lock (FOR UPDATE) the runs of workflow run ``wr_id``'s running nodes and return
    their ids. Read again after each lock until no new one appears: an ack holding one of
    these runs may commit a downstream run while this waits for it (continued on its
    worker, or pushed), and the read before the wait cannot see it; the read after it
    does (READ COMMITTED). Runs before node runs: the lock order everywhere."""
    locked: list[int] = []
    while True:
        fresh = _running_run_ids(wr_id, using) - set(locked)
        if not fresh:
            return locked
        locked += Run.objects.using(using).filter(pk__in=sorted(fresh)).order_by(
            "pk").select_for_update().values_list("pk", flat=True)
        # A run id whose row is gone (deleted by hand) must not be read again for ever.
        locked += sorted(fresh - set(locked))


def _running_subs(wr_id: int, using: str):
    """The running sub-workflow node runs of workflow run ``wr_id`` (a QuerySet)."""
    return NodeRun.objects.using(using).filter(
        workflow_run_id=wr_id, state=NodeState.RUNNING, child_run_id__isnull=False)


def _lock_running_subs(wr_id: int, using: str) -> list[int]:
    """Lock (FOR UPDATE, in id order) workflow run ``wr_id``'s running sub-workflow node
    runs and return their ids (docs/workflows.md, "Sub-workflows")."""
    return list(_running_subs(wr_id, using).order_by("id").select_for_update()
                .values_list("id", flat=True))


class _LockAgain(Exception):
    """A node started while cancel_workflow_run waited on its pending row: roll back and
    take the locks again, that node's run first."""


def cancel_workflow_run(workflow_run, using: str = "default") -> bool:
    """Cancel a running or paused workflow run (an instance or id): its pending nodes
    become ``cancelled`` without running, the runs of its running nodes are cancelled
    (runs/services.py's cancel: a handler executing is stopped), and the workflow run is
    ``cancelled``; once this returns, no run of it is left live, also one an ack, a
    resume or the reconcile made while this waited for it. Returns False when it had
    already ended (nothing changes)."""
    wr_id = _pk(workflow_run)
    for attempt in range(CANCEL_TRIES):
        try:
            cancelled = _cancel(wr_id, using, last=attempt == CANCEL_TRIES - 1)
        except _LockAgain:
            continue
        # Its children after its own commit, each on its own: a child's rows are locked
        # before its parent's (workflows/execution/subflows.py), never the other way.
        for child in _children(wr_id, using):
            cancel_workflow_run(child, using)
        return cancelled
    raise AssertionError("unreachable: the last try never raises _LockAgain")


def _children(wr_id: int, using: str, states=LIVE_WORKFLOW_STATES) -> list[int]:
    """The ids of the child workflow runs in ``states`` (default: running or paused)
    that workflow run ``wr_id``'s sub-workflow nodes started (docs/workflows.md,
    "Sub-workflows")."""
    ids = NodeRun.objects.using(using).filter(
        workflow_run_id=wr_id, child_run_id__isnull=False).values("child_run_id")
    return list(WorkflowRun.objects.using(using).filter(pk__in=ids, state__in=states)
                .order_by("pk").values_list("pk", flat=True))


CANCEL_TRIES = 3


def _cancel(wr_id: int, using: str, last: bool) -> bool:
    with transaction.atomic(using=using):
        now = db_now(using)
        run_ids = _lock_live_runs(wr_id, using)
        # A running sub-workflow node has no run: its node run stands for it, locked
        # before the pending ones, as its child's ending ack locks it before the nodes
        # below it (workflows/execution/subflows.py).
        subs = _lock_running_subs(wr_id, using)
        _lock_pending(wr_id, using)
        # A resume or a reconcile that held these pending rows before us may have
        # started nodes, and no run lock of ours waited for it. Locking those runs now
        # would take a lock against the order (a deadlock with their own ack): start
        # again instead, their runs among the first locked. After CANCEL_TRIES such
        # races the reconcile's _cancel_strays cancels what is left.
        if not last and (_running_run_ids(wr_id, using) - set(run_ids)
                         or set(_running_subs(wr_id, using).values_list("id", flat=True))
                         - set(subs)):
            raise _LockAgain
        changed = WorkflowRun.objects.using(using).filter(
            pk=wr_id, state__in=LIVE_WORKFLOW_STATES).update(
            state=WorkflowRunState.CANCELLED, finished_at=now,
            error="cancelled while it ran")
        if not changed:
            return False
        NodeRun.objects.using(using).filter(workflow_run_id=wr_id,
                                            state=NodeState.PENDING).update(
            state=NodeState.CANCELLED, finished_at=now, error="its workflow run was cancelled")
        # A sub-workflow node has no run to cancel: it is cancelled here, its child
        # after this commits (cancel_workflow_run).
        _running_subs(wr_id, using).update(state=NodeState.CANCELLED, finished_at=now,
                                           error="its workflow run was cancelled")
        run_services.cancel(run_ids, using)
        nesting.runs_ended([wr_id], now, using)  # a child's parent node is cancelled too
    return True


def pause_workflow_run(workflow_run, using: str = "default") -> bool:
    """Pause a running workflow run (an instance or id): once this returns, no node of it
    gets a run until resumed; the runs made before it finish. An ack that is making a
    downstream run at that moment commits before this returns (_lock_pending). Returns
    False when it was not running. Rule: docs/workflows.md, "Cancel and pause"."""
    wr_id = _pk(workflow_run)
    with transaction.atomic(using=using):
        _lock_pending(wr_id, using)
        paused = bool(WorkflowRun.objects.using(using).filter(
            pk=wr_id, state=WorkflowRunState.RUNNING).update(state=WorkflowRunState.PAUSED))
    if paused:  # its running children too, each after (docs/workflows.md, "Sub-workflows")
        for child in _children(wr_id, using, [WorkflowRunState.RUNNING]):
            pause_workflow_run(child, using)
    return paused


def resume_workflow_run(workflow_run, using: str = "default") -> bool:
    """Resume a paused workflow run (an instance or id): the nodes that became ready
    meanwhile start now, also one whose upstream's ack is committing at this moment, and
    a run whose nodes all ended meanwhile ends. Returns False when it was not paused."""
    wr_id = _pk(workflow_run)
    with transaction.atomic(using=using):
        # An ack of this run's nodes that saw it paused holds its candidates' locks: this
        # waits for it, then start_ready reads its success (_lock_pending).
        _lock_pending(wr_id, using)
        changed = WorkflowRun.objects.using(using).filter(
            pk=wr_id, state=WorkflowRunState.PAUSED).update(state=WorkflowRunState.RUNNING)
        if not changed:
            return False
        now = db_now(using)
        start_ready([wr_id], now, using)
        finish_if_done([wr_id], now, using)
    for child in _children(wr_id, using, [WorkflowRunState.PAUSED]):
        resume_workflow_run(child, using)
    return True


def pause_workflow(workflow, using: str = "default") -> bool:
    """Pause an active workflow's schedule: no run starts on it until resumed (runs
    already started go on; a trigger is refused meanwhile). Returns False when it was
    not active."""
    with transaction.atomic(using=using):
        return bool(Workflow.objects.using(using).filter(
            pk=_pk(workflow), status=Workflow.Status.ACTIVE).update(
            status=Workflow.Status.PAUSED, paused_at=db_now(using)))


def resume_workflow(workflow, using: str = "default") -> bool:
    """Resume a paused workflow: its schedule goes on from the first occurrence after now
    (the occurrences of the pause are skipped). Returns False when it was not paused.
    Raises InvalidJob naming ``schedule.cron`` or ``schedule.timezone`` when the stored
    schedule no longer reads (jobs/schedules/zones.py), and changes nothing."""
    with transaction.atomic(using=using):
        wf = (Workflow.objects.using(using).select_related("schedule")
              .select_for_update(of=("self",)).filter(pk=_pk(workflow),
                                                      status=Workflow.Status.PAUSED).first())
        if wf is None:
            return False
        now = db_now(using)
        wf.status, wf.paused_at = Workflow.Status.ACTIVE, None
        if wf.schedule is not None:
            if problems := zones.stored_problems(
                    wf.schedule.cron, wf.schedule.timezone, "schedule.",
                    "a workflow's schedule cannot be edited: cancel it and create it again"):
                raise InvalidJob(problems)
            wf.next_run_at = cron.next_after(wf.schedule.cron, wf.schedule.timezone, now)
        wf.save(using=using, update_fields=["status", "paused_at", "next_run_at", "updated_at"])
    return True


def cancel_workflow(workflow, using: str = "default") -> bool:
    """Cancel a workflow for good: it starts no run again (its schedule, a trigger, the
    API; a resume is refused), each of its live workflow runs is cancelled as
    cancel_workflow_run does, and its node jobs are cancelled with any pending run of
    theirs, so they no longer count against the owner's ``max_jobs`` (a tenant could not
    free that quota: a workflow could not be deleted, nor a node job cancelled). Its
    history stays: workflow runs, node runs, runs and attempts (docs/workflows.md,
    "Cancel and pause"). Returns False when it was cancelled already.

    Exact once it returns: the node jobs are cancelled in the first transaction, with the
    workflow, and a requeue locks the jobs of the runs it requeues (runs/services.py), so
    a requeue in flight commits before that transaction (and the workflow run it revived
    is among those cancelled next) and one after it finds the jobs cancelled and leaves
    the runs dead; an adversary revived a failed workflow run of the workflow that way."""
    pk = _pk(workflow)
    with transaction.atomic(using=using):
        now = db_now(using)
        # The UPDATE waits for a start holding the workflow's row lock
        # (services.start_workflow_run); a start after it reads cancelled.
        if not Workflow.objects.using(using).filter(
                pk=pk, status__in=[Workflow.Status.ACTIVE, Workflow.Status.PAUSED]).update(
                status=Workflow.Status.CANCELLED, paused_at=None, updated_at=now):
            return False
        job_ids = list(WorkflowNode.objects.using(using).filter(workflow_id=pk)
                       .values_list("job_id", flat=True))
        Job.objects.using(using).filter(
            pk__in=job_ids, status__in=[Job.Status.ACTIVE, Job.Status.PAUSED]).update(
            status=Job.Status.CANCELLED, paused_at=None, updated_at=now)
    # One listing: after that transaction no start is taken and no requeue revives a
    # workflow run of it (the docstring), so none becomes live that this does not see.
    for wr_id in WorkflowRun.objects.using(using).filter(
            workflow_id=pk, state__in=LIVE_WORKFLOW_STATES).values_list("pk", flat=True):
        cancel_workflow_run(wr_id, using)
    # A requeued node run of a cancelled workflow run runs alone (failures.py); one still
    # waiting goes with its workflow, through the hooks like any cancel.
    pending = list(Run.objects.using(using).filter(job_id__in=job_ids,
                                                   state__in=PENDING_STATES)
                   .values_list("pk", flat=True))
    if pending:
        run_services.cancel(pending, using)
    return True
