"""Backfill of a cron workflow: a workflow run for each past occurrence in a range that
has none (docs/workflows.md, "Backfill"), by the jobs' rules (jobs/schedules/backfill.py: range
``[start, end)`` in the schedule's timezone, at most BACKFILL_MAX_OCCURRENCES, made a
chunk per transaction with the progress on the WorkflowBackfill row).

Idempotent as the scheduler's own starts are (workflows/ticks.py): UNIQUE (workflow,
scheduled_at), so an occurrence with a workflow run already is skipped. Each run made is
a normal workflow run with ``started_by`` backfill and ``run_key``
``backfill:<backfill id>:<occurrence>``, by which the backfill's progress is counted.
"""

from collections.abc import Callable
from datetime import datetime

from django.db import transaction

from jobs import tenants
from jobs.schedules.backfill import make_in_chunks, plan
from runs.clock import db_now
from scheduler_core.exceptions import SchedulerError
from workflows.execution.quota import unmade_node_runs
from workflows.models import (
    LIVE_WORKFLOW_STATES,
    Workflow,
    WorkflowBackfill,
    WorkflowNode,
    WorkflowRun,
)
from workflows.services import begin_run


def backfill_workflow(workflow_id: int, start, end, *, using: str = "default",
                      requested_by=None,
                      on_progress: Callable[[int], None] | None = None,
                      on_planned: Callable[[WorkflowBackfill], None] | None = None
                      ) -> WorkflowBackfill:
    """Start a run of cron workflow ``workflow_id`` for each occurrence in ``[start,
    end)`` that has none; arguments and callbacks as jobs.schedules.backfill.backfill_job.

    Returns the WorkflowBackfill (``total``, ``made``, ``skipped``). Raises
    Workflow.DoesNotExist; InvalidJob naming ``start`` or ``end``; SchedulerError when the
    workflow has no schedule or is not active; QuotaExceeded when its nodes for every new
    run would take the owner over ``max_pending`` (before anything is made)."""
    workflow = Workflow.objects.using(using).select_related("schedule").get(pk=workflow_id)
    if workflow.schedule is None:
        raise SchedulerError(f"workflow {workflow_id} has no schedule; only a cron "
                             f"workflow has past occurrences to backfill")
    start, end, times = plan(workflow.schedule, start, end, db_now(using))
    if workflow.status != Workflow.Status.ACTIVE:
        raise SchedulerError(f"workflow {workflow_id} is {workflow.status}; only active "
                             f"workflows can be backfilled")

    def create() -> WorkflowBackfill:
        # The workflow row before the owner's quota lock, in _start_runs' order: the
        # other order deadlocked concurrent backfills.
        list(Workflow.objects.using(using).select_for_update(of=("self",)).filter(
            pk=workflow_id).values_list("pk", flat=True))
        _admit(workflow, times, using)
        return WorkflowBackfill.objects.using(using).create(
            workflow=workflow, start=start, end=end, total=len(times),
            requested_by=requested_by)

    return make_in_chunks(create, times, lambda pk, chunk: _start_runs(
        workflow_id, pk, chunk, using), using, on_progress, on_planned)


def _admit(workflow: Workflow, times: list[datetime], using: str) -> None:
    """Raise QuotaExceeded unless the nodes of a workflow run per occurrence of ``times``
    without one fit the owner's ``max_pending`` (as a start is admitted,
    workflows/services.py)."""
    bounds = tenants.bounds_of(workflow.owner_id, using)
    if bounds is None or not times:
        return
    new = len(times) - WorkflowRun.objects.using(using).filter(
        workflow=workflow, scheduled_at__in=times).count()
    nodes = WorkflowNode.objects.using(using).filter(workflow=workflow).count()
    tenants.check_quotas(bounds, 0, new * nodes, using, promised=unmade_node_runs)


def _start_runs(workflow_id: int, backfill_id: int, times: list[datetime],
                using: str) -> int:
    """One chunk: with the workflow's row locked (as a start and the scheduler's tick
    lock it), start a workflow run at each of ``times`` that has none. Returns how many
    were started."""
    with transaction.atomic(using=using):
        workflow = (Workflow.objects.using(using).select_related("schedule")
                    .select_for_update(of=("self",)).get(pk=workflow_id))
        if workflow.status != Workflow.Status.ACTIVE:
            raise SchedulerError(f"workflow {workflow_id} became {workflow.status}; the "
                                 f"backfill stopped")
        _admit(workflow, times, using)
        now = db_now(using)
        started = 0
        for when in times:
            key = f"backfill:{backfill_id}:{when.isoformat()}"
            if begin_run(workflow, when, WorkflowRun.StartedBy.BACKFILL, key, now,
                         using) is not None:
                started += 1
    return started


def finished_count(backfill: WorkflowBackfill) -> int:
    """How many of the workflow runs ``backfill`` made have ended (succeeded, failed or
    cancelled)."""
    return WorkflowRun.objects.using(backfill._state.db).filter(
        workflow_id=backfill.workflow_id, scheduled_at__gte=backfill.start,
        scheduled_at__lt=backfill.end, run_key__startswith=f"backfill:{backfill.pk}:",
    ).exclude(state__in=LIVE_WORKFLOW_STATES).count()
