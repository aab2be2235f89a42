"""The workflows' share of each scheduler tick (jobs/schedules/scheduler.py's ``scheduler_tick``),
under the scheduler's own partition leases: workflow ``id % PARTITIONS`` belongs to the
partition of the same number (docs/workflows.md, "Schedules").

Cron workflow runs are made as cron jobs' runs are: due active workflows of the held
partitions claimed FOR UPDATE SKIP LOCKED, their occurrences planned by the jobs' own
``plan_occurrences`` (timezone, misfire policy, max lag, LOOKAHEAD_S), one workflow run
per occurrence (UNIQUE (workflow, scheduled_at): two schedulers that both believe they
hold a partition still make one), and ``next_run_at`` advanced fenced on the value it
was claimed with; the occurrences the misfire policy skips are told to the workflow's
owner as a cron job's are (a ``misfire`` alert, docs/alerts.md). Every
WORKFLOW_RECONCILE_S the same partitions' live workflow runs are reconciled
(workflows/reconcile.py) and those ended past the history retention deleted
(workflows/history.py).
"""

import time

from django.db import transaction

from jobs.schedules.scheduler import plan_occurrences
from runs.alerts.models import AlertKind
from runs.alerts.policy import raise_alerts
from runs.clock import db_now, seconds
from runs.daemons.daemon import transient
from runs.daemons.isolation import Faults, one_by_one
from scheduler_core import conf
from workflows.history import BATCH as HISTORY_BATCH
from workflows.history import prune_workflow_runs
from workflows.models import Workflow, WorkflowRun
from workflows.reconcile import in_partitions, reconcile
from workflows.services import begin_run

BATCH = 200  # cron workflows claimed per transaction


def start_scheduled(partitions: list[int], total: int, using: str, *,
                    only: list[int] | None = None, held: list | tuple = (),
                    claimed: list | None = None) -> tuple[int, bool]:
    """One batch: start the due occurrences of up to BATCH active cron workflows of
    ``partitions`` (of the ids ``only`` when given; none of the ids ``held``). The ids
    claimed are appended to ``claimed`` when given. Returns (workflow runs started, more
    workflows may be due)."""
    started = 0
    with transaction.atomic(using=using):
        now = db_now(using)
        horizon = now + seconds(conf.get("LOOKAHEAD_S"))
        due = Workflow.objects.using(using).filter(
            status=Workflow.Status.ACTIVE, schedule__isnull=False, next_run_at__lte=horizon)
        if only is not None:
            due = due.filter(pk__in=only)
        if held:
            due = due.exclude(pk__in=held)
        workflows = list(in_partitions(due, partitions, total).select_related("schedule")
                         .select_for_update(skip_locked=True, of=("self",))
                         .order_by("next_run_at")[:BATCH])
        if claimed is not None:
            claimed += [workflow.pk for workflow in workflows]
        grace_s = conf.get("MISFIRE_GRACE_S")
        misfires = []
        for workflow in workflows:
            skipped: list = []
            times, next_run_at = plan_occurrences(workflow, now, horizon, grace_s=grace_s,
                                                  skipped=skipped)
            if skipped:
                misfires.append((workflow.owner_id, None, None,
                                 misfire_detail(workflow, skipped)))
            for when in times:
                if begin_run(workflow, when, WorkflowRun.StartedBy.SCHEDULE, None, now,
                             using) is not None:
                    started += 1
            Workflow.objects.using(using).filter(
                pk=workflow.pk, next_run_at=workflow.next_run_at).update(next_run_at=next_run_at)
        if misfires:
            raise_alerts(AlertKind.MISFIRE, misfires, now, using)
    return started, len(workflows) == BATCH


def misfire_detail(workflow: Workflow, skipped: list) -> str:
    """The owner's misfire alert (docs/alerts.md) of ``workflow``: which of its
    occurrences (aware datetimes) the schedule's misfire policy skipped, as a cron job's
    (jobs.schedules.scheduler.misfire_detail)."""
    shown = ", ".join(t.isoformat() for t in skipped[:5])
    more = f" and {len(skipped) - 5} more" if len(skipped) > 5 else ""
    return (f"workflow {workflow.pk} ({workflow.name}): {len(skipped)} occurrence(s) missed "
            f"while no scheduler ran were skipped by its misfire policy "
            f"{workflow.schedule.misfire_policy}: {shown}{more}")


def start_isolated(faults: Faults, partitions: list[int], total: int, using: str) -> bool:
    """``start_scheduled``, with a cron workflow whose runs cannot be started (a schedule
    that raises at evaluation, a graph the engine cannot begin) set aside as the jobs'
    scheduler sets aside a cron job (jobs/schedules/scheduler.py, materialize_isolated): logged,
    counted and left out of the claims for its backoff while the others start. Returns
    whether more workflows may be due; raises transient errors."""
    claimed: list[int] = []
    try:
        return start_scheduled(partitions, total, using, claimed=claimed,
                               held=faults.held_back("cron_workflow"))[1]
    except Exception as exc:
        if transient(exc):
            raise
        one_by_one(faults, "cron_workflow", claimed, exc,
                   lambda pk: start_scheduled(partitions, total, using, only=[pk])[0])
        return True


def on_scheduler_tick(sender, scheduler, partitions: list[int], total: int, using: str,
                      **kwargs) -> None:
    """The ``scheduler_tick`` receiver. Database and broker errors go up to the daemon,
    which backs off; any other error is one workflow's (start_isolated) or one duty's
    (the reconcile, the pruning), logged, counted and backed off by the scheduler's
    faults (runs/daemons/isolation.py), so neither stops the jobs' scheduler nor the others."""
    faults = scheduler.faults
    faults.run("cron_workflows", lambda: tick_workflows(scheduler, partitions, total, using))


def tick_workflows(scheduler, partitions: list[int], total: int, using: str) -> None:
    """Start the due cron workflows of ``partitions``; reconcile and prune their runs
    every WORKFLOW_RECONCILE_S."""
    faults = scheduler.faults
    while start_isolated(faults, partitions, total, using) and not scheduler.stopping:
        pass
    interval = conf.get("WORKFLOW_RECONCILE_S")
    due_at = getattr(scheduler, "workflow_reconcile_at", 0.0)
    if time.monotonic() >= due_at:
        scheduler.workflow_reconcile_at = time.monotonic() + interval
        faults.run("workflow_reconcile", lambda: reconcile(partitions, total, using))
        faults.run("workflow_prune", lambda: prune_all(scheduler, partitions, total, using))


def prune_all(scheduler, partitions: list[int], total: int, using: str) -> None:
    """Delete the workflow runs of ``partitions`` past the history retention, a batch at
    a time until none is left or the scheduler stops."""
    while (prune_workflow_runs(partitions, total, using) == HISTORY_BATCH
           and not scheduler.stopping):
        pass
