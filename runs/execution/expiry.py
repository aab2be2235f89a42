"""Expiry (the job fields ``expires_at`` / ``expires_in_s``, docs/retries-and-expiry.md):
a run not started by its deadline ends ``expired`` when a worker would lease it, and
never runs: the lease's own statement refuses to start it (runs/execution/transitions.py,
start_attempts, on the database clock), and the run is ended ``expired`` by the same
call, in the lease's transaction off PostgreSQL, by a statement only refused runs cost
on it. The deadline is the job's ``expires_at``, else the run's ``scheduled_at`` plus
the job's ``expires_in_s`` (so each cron occurrence gets its own). Every attempt's start
is checked: a retry due after the deadline expires too.
"""

from datetime import UTC, datetime

from django.db import connections, transaction
from django.db.models import Q

from jobs.models import Job
from runs.clock import seconds
from runs.execution import hooks, outcomes
from runs.models import PENDING_STATES, Run, RunState


def deadline_sql(run_table: str) -> str:
    """The SQL expression of a run's deadline inside a subquery on the jobs table (its
    columns unqualified), the run's table named ``run_table``; NULL: it never expires."""
    return f"COALESCE(expires_at, {run_table}.scheduled_at + expires_in_s * interval '1 second')"


def error_sql(deadline: str) -> str:
    """The SQL expression of EXPIRED_ERROR for the SQL expression ``deadline``."""
    return EXPIRED_ERROR_SQL.format(deadline=deadline)


def fate_sql(run_table: str, job_table: str) -> str:
    """The SQL expression, in a statement on ``run_table``, of what a run's job says of its
    start: the job's status, or 'expired' when the job is active and the run's deadline
    is at or before statement_timestamp() (the database clock, one value for the whole
    statement; a filter on a CTE's clock made the planner scan the runs instead of
    walking the leased ids, tests/test_worker_fastpaths.py). In the WHERE clause it is
    re-checked after a wait on a row lock, as the status was."""
    return (f"(SELECT CASE WHEN status = 'active' AND {deadline_sql(run_table)} <= "
            f"statement_timestamp() THEN 'expired' ELSE status END FROM {job_table} "
            f"WHERE id = {run_table}.job_id)")


def expire_refused_pg(run_ids: list[int], using: str) -> None:
    """Of ``run_ids``, runs a lease statement refused to start (PostgreSQL), end those it
    refused for their expiry ``expired`` with the reason, and tell the listeners in the
    same transaction; then log and count them. Runs refused for another reason (no longer
    pending, a paused job) are left alone. The deadline had passed on the lease's clock,
    so it has on this later statement's too."""
    run, job = Run._meta.db_table, Job._meta.db_table
    sql = (f"UPDATE {run} SET state = %s, finished_at = clock_timestamp(), "
           f"lease_expires_at = NULL, error = (SELECT {error_sql(deadline_sql(run))} "
           f"FROM {job} WHERE id = {run}.job_id) "
           f"WHERE {run}.id = ANY(%s::bigint[]) AND ({run}.state || '') = ANY(%s) "
           f"AND {fate_sql(run, job)} = 'expired' "
           f"RETURNING {run}.id, {run}.job_id, {run}.queue, {run}.finished_at")
    params = [RunState.EXPIRED, "{" + ",".join(str(int(i)) for i in run_ids) + "}",
              [str(s) for s in PENDING_STATES]]
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
        if rows:
            hooks.notify(hooks.EXPIRED, [r[0] for r in rows], rows[0][3], using)
            _report_after_commit([r[:3] for r in rows], using)


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


def _report_after_commit(gone: list[tuple[int, int, str]], using: str) -> None:
    """The log line, the ``run_expired`` signal and the count (scheduler_runs_total,
    state "expired") of each expired run, once its change committed (runs/execution/outcomes.py)."""
    def report() -> None:
        rows = {r[0]: r[1:] for r in Run.objects.using(using).filter(
            pk__in=[g[0] for g in gone]).values_list("pk", "error", "attempt")}
        for run_id, job_id, queue in gone:
            error, attempt = rows.get(run_id, ("", 0))
            outcomes.report(run_id=run_id, job_id=job_id, handler=None, attempt=attempt,
                            outcome="expired", state="expired", duration_s=None,
                            error=error, queue=queue)
    transaction.on_commit(report, using=using)
