"""Operations on runs for the REST API and the admin (both call these, never ``save()``
on a run: docs/architecture.md, "Conventions in the code"): requeue dead or failed runs,
cancel runs, discard dead letters."""

from django.db import transaction
from django.db.models import F, Q

from jobs.models import Job
from runs.brokers import get_broker
from runs.clock import db_now
from runs.execution import hooks
from runs.execution.transitions import run_refs
from runs.models import PENDING_STATES, Attempt, AttemptOutcome, Run, RunState
from runs.tenancy.limits import owner_limits
from runs.tenancy.quotas import fit_pending

REQUEUEABLE = (RunState.DEAD, RunState.CANCELLED)


def requeue(run_ids, using: str = "default", states=REQUEUEABLE,
            strict: bool = False) -> int:
    """Send dead (or cancelled) runs back to the queue now with a fresh attempt budget:
    the run may make its job's ``max_attempts`` more attempts (attempt numbers keep
    counting up, so old acks stay fenced out). Runs of a job that is not active, and runs
    no longer in one of ``states`` (a subset of REQUEUEABLE) when their row is locked, are
    left alone, and so are the runs that would take their owner over its pending-runs
    quota (``max_pending``, runs/tenancy/quotas.py's fit_pending: lowest ids first), as a trigger
    would be refused (docs/isolation.md, "Tenant bounds"); a run counts with the runs its
    requeue revives (a workflow node's descendants: runs/execution/hooks.py, requeue_revives).
    With ``strict``, such a run raises runs.tenancy.quotas.QuotaExceeded instead and nothing is
    requeued. Returns how many runs were requeued."""
    broker = get_broker(using)
    with transaction.atomic(using=using):
        runs = Run.objects.using(using).filter(
            pk__in=list(run_ids), state__in=states, job__status="active"
        )
        locked = list(runs.select_for_update(of=("self",)).values_list(
            "pk", "job__owner_id", "job_id"))
        # Their jobs locked too, and read again once locked: a cancel of their workflow
        # (workflows/control.py, cancel_workflow) waits for this requeue, or this one
        # waits for it and finds the jobs no longer active.
        active = set(Job.objects.using(using).filter(
            pk__in={row[2] for row in locked}, status=Job.Status.ACTIVE)
            .select_for_update().values_list("pk", flat=True))
        owned = [(pk, owner_id) for pk, owner_id, job_id in locked if job_id in active]
        ids, refused = fit_pending(owned, using, hooks.requeue_revives([o[0] for o in owned],
                                                                       using), hooks.promised)
        if refused is not None and strict:
            raise refused
        now = db_now(using)
        _requeue_rows(ids, now, using)
        hooks.notify(hooks.REQUEUED, ids, now, using)
        broker.push_after_commit(run_refs(Run.objects.using(using).filter(pk__in=ids)))
    return len(ids)


def _requeue_rows(ids, now, using) -> int:
    # An UPDATE cannot read the job's columns through a join, so group by budget.
    count = 0
    budgets = dict(
        Run.objects.using(using).filter(pk__in=ids).values_list("pk", "job__max_attempts")
    )
    for budget in set(budgets.values()):
        count += Run.objects.using(using).filter(
            pk__in=[pk for pk, b in budgets.items() if b == budget], state__in=REQUEUEABLE
        ).update(
            state=RunState.SCHEDULED, run_at=now, finished_at=None, error="",
            max_attempts=F("attempt") + budget,
            # The last attempt's worker and start are its Attempt's now: a queued run
            # showing them read as if it were running there again.
            worker_id="", started_at=None, lease_expires_at=None,
        )
    return count


def cancel(run_ids, using: str = "default") -> int:
    """Cancel pending or running runs. Returns how many runs were cancelled.

    A running run's attempt is closed at once as ``cancelled`` with ``finished_at`` now
    (so it never stays ``running``, whatever becomes of its worker), and its worker stops
    the handler: it notices within ``CANCEL_CHECK_S``, signals the child and kills it
    after ``CANCEL_GRACE_S`` (docs/architecture.md, "Cancelling a running run"). The
    worker's own ack is then refused (fencing), but the log lines it sends are kept on the
    attempt."""
    with transaction.atomic(using=using):
        now = db_now(using)
        # Locked first, so a run leased meanwhile is not cancelled with its attempt open.
        rows = list(Run.objects.using(using).filter(
            pk__in=list(run_ids), state__in=[*PENDING_STATES, RunState.RUNNING])
            .select_for_update(of=("self",)).values_list("pk", "attempt", "state"))
        count = Run.objects.using(using).filter(pk__in=[row[0] for row in rows]).update(
            state=RunState.CANCELLED, finished_at=now, lease_expires_at=None)
        running = [(pk, number) for pk, number, state in rows if state == RunState.RUNNING]
        if running:
            match = Q(pk__in=[])
            for run_id, number in running:
                match |= Q(run_id=run_id, number=number)
            Attempt.objects.using(using).filter(
                match, outcome=AttemptOutcome.RUNNING).update(
                outcome=AttemptOutcome.CANCELLED, finished_at=now,
                error="cancelled while running")
        hooks.notify(hooks.CANCELLED, [row[0] for row in rows], now, using)
        return count


def discard(run_ids, using: str = "default") -> int:
    """Take dead runs out of the dead letter without running them again (they become
    ``cancelled``; their attempts and logs are kept, and ``finished_at`` becomes now, so
    the history retention counts from the discard, docs/retention.md). Returns how many
    were discarded."""
    with transaction.atomic(using=using):
        return Run.objects.using(using).filter(pk__in=list(run_ids), state=RunState.DEAD).update(
            state=RunState.CANCELLED, finished_at=db_now(using)
        )


def sync_owner_limits(using: str = "default") -> None:
    """Make the broker enforce the owner limits stored now (after the transaction commits
    if one is open). A broker outage is logged: the dispatcher's next reconcile syncs."""
    broker = get_broker(using)
    transaction.on_commit(
        lambda: broker._after_commit(broker.sync_limits, owner_limits(using)), using=using)
