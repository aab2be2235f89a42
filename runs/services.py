"""Operations on runs for the REST API and the admin (both call these, never ``save()``
on a run: docs/architecture.md, "Conventions in the code"): requeue dead or failed runs,
cancel runs, discard dead letters."""

from django.db import transaction
from django.db.models import F

from runs.brokers import get_broker
from runs.clock import db_now
from runs.limits import owner_limits
from runs.models import PENDING_STATES, Run, RunState
from runs.transitions import run_refs

REQUEUEABLE = (RunState.DEAD, RunState.CANCELLED)


def requeue(run_ids, using: str = "default") -> int:
    """Send dead (or cancelled) runs back to the queue now with a fresh attempt budget:
    the run may make its job's ``max_attempts`` more attempts (attempt numbers keep
    counting up, so old acks stay fenced out). Runs of a job that is not active are left
    alone. Returns how many runs were requeued."""
    broker = get_broker(using)
    with transaction.atomic(using=using):
        runs = Run.objects.using(using).filter(
            pk__in=list(run_ids), state__in=REQUEUEABLE, job__status="active"
        )
        ids = list(runs.select_for_update(of=("self",)).values_list("pk", flat=True))
        _requeue_rows(ids, db_now(using), using)
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
        )
    return count


def cancel(run_ids, using: str = "default") -> int:
    """Cancel pending or running runs. A running handler is not interrupted, but its
    worker's ack is refused (fencing), so the run keeps the outcome ``cancelled``.
    Returns how many runs were cancelled."""
    with transaction.atomic(using=using):
        return Run.objects.using(using).filter(
            pk__in=list(run_ids), state__in=[*PENDING_STATES, RunState.RUNNING]
        ).update(state=RunState.CANCELLED, finished_at=db_now(using), lease_expires_at=None)


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
