"""Expiry (the job fields ``expires_at`` / ``expires_in_s``, docs/retries-and-expiry.md):
a run not started by its deadline ends ``expired`` when a worker would lease it, on the
database clock, in the lease's own statement (runs/transitions.py, start_attempts), and
never runs. The deadline is the job's ``expires_at``, else the run's ``scheduled_at`` plus
the job's ``expires_in_s`` (so each cron occurrence gets its own). Every attempt's start
is checked: a retry due after the deadline expires too.
"""

from datetime import UTC, datetime

from django.db import transaction
from django.db.models import Q

from runs import hooks, outcomes
from runs.clock import db_now, seconds
from runs.models import PENDING_STATES, Run, RunState


def deadline_sql(run_table: str) -> str:
    """The SQL expression of a run's deadline inside a subquery on the jobs table (its
    columns unqualified), the run's table named ``run_table``; NULL: it never expires."""
    return f"COALESCE(expires_at, {run_table}.scheduled_at + expires_in_s * interval '1 second')"


def error_sql(deadline: str) -> str:
    """The SQL expression of EXPIRED_ERROR for the SQL expression ``deadline``."""
    return EXPIRED_ERROR_SQL.format(deadline=deadline)


# The reason an expired run gives (its error): when its expiry was, in UTC.
EXPIRED_ERROR = "expired: not started by its expiry, {deadline:%Y-%m-%dT%H:%M:%S.%fZ}"
EXPIRED_ERROR_SQL = ("'expired: not started by its expiry, ' || to_char({deadline} AT TIME "
                     "ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")


def expire_due(pending, now: datetime, using: str) -> list[int]:
    """start_attempts' expiry off PostgreSQL: the runs of ``pending`` (a queryset of runs
    that would start) whose expiry is at or before ``now`` end ``expired``, with the
    reason; returns their ids. Inside the lease's transaction."""
    rows = pending.filter(Q(job__expires_at__isnull=False) | Q(job__expires_in_s__isnull=False)
                          ).values_list("id", "scheduled_at", "job__expires_at",
                                        "job__expires_in_s", "job_id", "queue")
    due, gone = {}, []
    for run_id, scheduled_at, at, in_s, job_id, queue in rows:
        deadline = at if at is not None else scheduled_at + seconds(in_s)
        if deadline <= now:
            due[run_id] = EXPIRED_ERROR.format(deadline=deadline.astimezone(UTC))
            gone.append((run_id, job_id, queue))
    for run_id, error in due.items():
        Run.objects.using(using).filter(pk=run_id, state__in=PENDING_STATES).update(
            state=RunState.EXPIRED, finished_at=now, lease_expires_at=None, error=error)
    if gone:
        hooks.notify(hooks.EXPIRED, list(due), now, using)
        _report_after_commit(gone, using)
    return list(due)


def tell(gone: list[tuple[int, int, str]], using: str) -> None:
    """After the lease statement expired runs ``gone`` ((run id, job id, queue); on
    PostgreSQL, where the lease is one statement outside a transaction when the claim is
    Redis's): the listeners told in a transaction of their own, so a crash between the two
    leaves the repair to the listener's reconcile (runs/hooks.py); then logged and counted."""
    if hooks.watching():
        with transaction.atomic(using=using):
            hooks.notify(hooks.EXPIRED, [g[0] for g in gone], db_now(using), using)
    _report_after_commit(gone, using)


def _report_after_commit(gone: list[tuple[int, int, str]], using: str) -> None:
    """The log line, the ``run_expired`` signal and the count (scheduler_runs_total,
    state "expired") of each expired run, once its change committed (runs/outcomes.py)."""
    def report() -> None:
        rows = {r[0]: r[1:] for r in Run.objects.using(using).filter(
            pk__in=[g[0] for g in gone]).values_list("pk", "error", "attempt")}
        for run_id, job_id, queue in gone:
            error, attempt = rows.get(run_id, ("", 0))
            outcomes.report(run_id=run_id, job_id=job_id, handler=None, attempt=attempt,
                            outcome="expired", state="expired", duration_s=None,
                            error=error, queue=queue)
    transaction.on_commit(report, using=using)
