"""How long the history is kept: finished runs, with their attempts and log lines, are
deleted once HISTORY_RETENTION_S has passed since they finished (docs/retention.md).

At 10 M runs a day the runs, attempts and log tables would otherwise grow without bound
(docs/architecture.md, "Measured limits behind the design"), as every peer knows:
Celery expires results after a day, RQ after 500 s, django-q2 keeps the last 250
successes, procrastinate ships a task that removes old jobs.

What goes: runs ``succeeded`` or ``cancelled`` that finished before the cutoff, then the
one-off jobs left with no run at all; and the stored Idempotency-Key responses past
IDEMPOTENCY_TTL_S (prune_idempotency_keys). What stays: dead runs (the dead letter, until an
operator requeues or discards them), runs not finished, and every cron job. The
dispatcher prunes its own shards in batches (runs/daemons/dispatcher.py); ``manage.py
prunehistory`` does it on demand. On PostgreSQL the history is in time partitions and
whole partitions go at once (drop_partitions, runs/history/time_partitions.py).
"""

import logging
from dataclasses import dataclass
from datetime import datetime

from django.db import connections, transaction
from django.db.models import Q
from django.db.models.expressions import RawSQL

from jobs.models import IdempotencyKey, Job
from runs.clock import db_now, seconds
from runs.execution import hooks
from runs.execution.transitions import in_shards
from runs.history import named_leases as leases
from runs.history import time_partitions as history_partitions
from runs.models import AlertPolicy, Attempt, LogLine, Run, RunState
from scheduler_core import conf

log = logging.getLogger("scheduler.retention")
PRUNABLE_STATES = (RunState.SUCCEEDED, RunState.CANCELLED)


@dataclass
class Pruned:
    """What one prune call deleted (counts of rows)."""

    runs: int = 0
    attempts: int = 0
    log_lines: int = 0
    jobs: int = 0

    def add(self, other: "Pruned") -> None:
        self.runs += other.runs
        self.attempts += other.attempts
        self.log_lines += other.log_lines
        self.jobs += other.jobs


# Retentions longer than this (about 31 years) keep everything: the cutoff would fall
# before any date the database holds (and inf, NaN or 1e12 s cannot be subtracted).
RETENTION_MAX_S = 1e9


def cutoff(retention_s: float, using: str = "default") -> datetime | None:
    """The instant (UTC, database clock) before which finished runs go, for a retention
    of ``retention_s`` seconds; None when nothing is to go (0 or less, not a number, or
    over RETENTION_MAX_S)."""
    if not 0 < retention_s <= RETENTION_MAX_S:  # False for NaN too
        return None
    return db_now(using) - seconds(retention_s)


def prunable(before: datetime, using: str = "default", shards: list[int] | None = None):
    """The runs a prune with cutoff ``before`` deletes (``shards``: only those; None:
    all), less those a run keeper keeps (runs/execution/hooks.py's keep_runs: the runs of a live
    workflow run's nodes). Served by the run_state_finished index (state, finished_at)."""
    runs = Run.objects.using(using).filter(state__in=PRUNABLE_STATES, finished_at__lt=before)
    kept = hooks.kept_runs_sql(Run._meta.db_table)
    if kept:  # runs something above still reads (a live workflow run's results)
        runs = runs.exclude(pk__in=RawSQL(kept, []))
    return in_shards(runs, shards)


def prune(before: datetime, limit: int, using: str = "default",
          shards: list[int] | None = None, where: Q | None = None) -> Pruned:
    """Delete at most ``limit`` runs finished (succeeded or cancelled) before ``before``
    (aware datetime), with their attempts and log lines, then the one-off jobs of those
    runs left with no run, in one transaction. Returns the counts deleted; fewer than
    ``limit`` runs means none are left to prune.

    Locks, in the order trigger and requeue take them (job, then run): the runs' one-off
    jobs first, by id, so a run a trigger adds to one meanwhile is either committed
    before the job is checked (and the job stays) or waits and finds it gone, and two
    prunes of one job's runs see each other's deletes (the second deletes the job); then
    the runs, skipping any locked (being requeued: the next batch sees them again).
    Deletes are plain statements by key, children first, so nothing is loaded or
    cascaded. ``where``: only the prunable runs it also matches (the dispatcher's
    history_partitions.row_scopes)."""
    with transaction.atomic(using=using):
        candidates = list(prunable(before, using, shards).filter(where or Q()).order_by()
                          .values_list("pk", "job_id")[:limit])
        if not candidates:
            return Pruned()
        one_off = list(Job.objects.using(using)
                       .filter(pk__in={job for _, job in candidates}, schedule__isnull=True)
                       .order_by("pk").select_for_update().values_list("pk", flat=True))
        run_ids = list(prunable(before, using).filter(pk__in=[pk for pk, _ in candidates])
                       .select_for_update(skip_locked=True).values_list("pk", flat=True))
        if not run_ids:
            return Pruned()
        with connections[using].cursor() as cursor:
            pruned = Pruned(
                log_lines=_delete(cursor, LogLine, "attempt_id IN (SELECT id FROM {attempt} "
                                  "WHERE run_id IN ({ids}))", run_ids),
                attempts=_delete(cursor, Attempt, "run_id IN ({ids})", run_ids),
                runs=_delete(cursor, Run, "id IN ({ids})", run_ids))
            if one_off:
                pruned.jobs = _delete_jobs_without_runs(cursor, one_off)
        return pruned


def _delete_jobs_without_runs(cursor, one_off: list[int]) -> int:
    """Delete the jobs among ``one_off`` (ids of one-off jobs, locked by the caller) left
    with no run, and their alert overrides; returns the jobs deleted."""
    # Jobs something else still points at (a workflow's node: runs/execution/hooks.py) stay, with
    # no run left.
    kept = "".join(f" AND NOT EXISTS (SELECT 1 FROM {table} AS k WHERE "
                   f"k.{column} = {{table}}.id)" for table, column in hooks.job_keepers())
    jobs = _delete(cursor, Job, "id IN ({ids}) AND schedule_id IS NULL AND NOT EXISTS "
                   "(SELECT 1 FROM {run} WHERE {run}.job_id = {table}.id)" + kept, one_off)
    if jobs:  # the alert overrides of the jobs just deleted
        _delete(cursor, AlertPolicy, "job_id IN ({ids}) AND NOT EXISTS (SELECT 1 "
                f"FROM {Job._meta.db_table} AS j WHERE j.id = {{table}}.job_id)", one_off)
    return jobs


def drop_partitions(before: datetime, using: str = "default", count: bool = True,
                    finish: bool = True) -> Pruned:
    """On a partitioned database (runs/history/time_partitions.py), retire every time partition
    wholly older than ``before``: detach it from the runs, attempts and log tables with
    the runs retention keeps copied back (one short transaction; the runs are then gone
    from every query), then, with ``finish``, finish_detached: delete the one-off jobs it
    leaves with no run and drop the detached tables. The dispatcher passes
    ``finish=False`` and leaves finish_detached to a thread of its own, since dropping a
    day's files costs the filesystem seconds (docs/retention.md, "Retired whole").
    Returns what went: exact counts with ``count``, else the planner's estimates (no
    scan); without ``finish``, the estimated rows of the partitions just detached. No-op
    (nothing pruned) on plain tables. Raises django.db.OperationalError when the tables
    stay locked past history_partitions.LOCK_TIMEOUT (try again later)."""
    if not history_partitions.partitioned(using):
        return Pruned()
    done = history_partitions.detach_expired(using, before)
    if finish:
        return finish_detached(using, count)
    total = Pruned()
    with connections[using].cursor() as cursor:
        for bounds, _ in done:
            run, attempt, line = (f"{table}_{bounds.suffix}"
                                  for table, _ in history_partitions.TABLES)
            total.add(Pruned(runs=history_partitions.estimate(cursor, run),
                             attempts=history_partitions.estimate(cursor, attempt),
                             log_lines=history_partitions.estimate(cursor, line)))
    return total


def finish_detached(using: str = "default", count: bool = True) -> Pruned:
    """Finish every history partition detached and not yet dropped (by drop_partitions,
    or left by a crash after its detach): delete the one-off jobs it leaves with no run
    (in batches of JOB_BATCH, locked as prune locks them), then drop the detached tables
    (one statement). Returns what went: exact counts with ``count``, else
    the planner's estimates. Only one process at a time does it, under the lease
    history_partitions.FINISH_LEASE (runs/history/named_leases.py; a row, so it holds through
    PgBouncer's transaction pooling): another finds it held and returns nothing pruned.
    The lease is renewed before every step and given back at the end; a holder that
    dies leaves it to expire (FINISH_LEASE_S). Every step is one transaction and can be
    redone, so a crash leaves the rest to the next call; a holder that finds its lease
    lost stops there, returning what it did (docs/retention.md, "Retired whole")."""
    total = Pruned()
    if not history_partitions.partitioned(using):
        return total
    holder = leases.new_holder()

    def keep() -> bool:
        return leases.take(history_partitions.FINISH_LEASE, holder,
                           history_partitions.FINISH_LEASE_S, using)

    if not keep():
        return total
    try:
        with connections[using].cursor() as cursor:
            suffixes = history_partitions.detached(cursor)
        for suffix in suffixes:
            if not keep():
                raise _LeaseLost
            total.add(_delete_jobs_left(suffix, using, count, keep))
        if suffixes:  # one statement: one pass over the buffers, one commit
            if not keep():
                raise _LeaseLost
            with connections[using].cursor() as cursor:
                cursor.execute("DROP TABLE IF EXISTS " + ", ".join(
                    f"{table}_{suffix}" for suffix in suffixes
                    for table, _ in reversed(history_partitions.TABLES)))
    except _LeaseLost:
        return _lost(total)
    finally:
        leases.release(history_partitions.FINISH_LEASE, holder, using)
    return total


class _LeaseLost(Exception):
    """The finish lease expired and another holder took it between two steps."""


def _lost(total: Pruned) -> Pruned:
    # Only when a step outlasted FINISH_LEASE_S: the new holder redoes what is left.
    log.warning("finishing detached partitions: lease lost to another holder, stopped")
    return total


def _delete_jobs_left(suffix: str, using: str, count: bool, keep) -> Pruned:
    """Delete the one-off jobs detached partition ``suffix`` leaves with no run; returns
    what it held (see finish_detached). ``keep``: renews the lease before each batch,
    False when lost (then raises _LeaseLost)."""
    one_off: set[int] = set()
    total = _count_detached(suffix, using, count, one_off)
    ids = sorted(one_off)
    for start in range(0, len(ids), JOB_BATCH):
        if not keep():
            raise _LeaseLost
        with transaction.atomic(using=using), connections[using].cursor() as cursor:
            locked = list(Job.objects.using(using).filter(
                pk__in=ids[start:start + JOB_BATCH], schedule__isnull=True)
                .order_by("pk").select_for_update().values_list("pk", flat=True))
            if locked:
                total.jobs += _delete_jobs_without_runs(cursor, locked)
    return total


JOB_BATCH = 5000


def _count_detached(suffix: str, using: str, count: bool, one_off: set[int]) -> Pruned:
    """What detached partition ``suffix`` held that was not kept (exact with ``count``,
    else the planner's estimates); adds to ``one_off`` the one-off jobs it had runs of."""
    run, attempt, line = (f"{table}_{suffix}" for table, _ in history_partitions.TABLES)
    pruned = Pruned()
    with connections[using].cursor() as cursor:
        for field, table, parent in (("runs", run, "runs_run"),
                                     ("attempts", attempt, "runs_attempt"),
                                     ("log_lines", line, "runs_logline")):
            if count:  # the kept rows were copied to the DEFAULT partition, same ids
                cursor.execute(f"SELECT count(*) FROM {table} d WHERE NOT EXISTS (SELECT 1 "
                               f"FROM {parent}_default k WHERE k.id = d.id)")
                setattr(pruned, field, cursor.fetchone()[0])
            else:
                setattr(pruned, field, history_partitions.estimate(cursor, table))
        cursor.execute(f"SELECT j.id FROM {Job._meta.db_table} j WHERE j.schedule_id IS NULL "
                       f"AND EXISTS (SELECT 1 FROM {run} d WHERE d.job_id = j.id)")
        one_off.update(row[0] for row in cursor.fetchall())
    return pruned


def prune_idempotency_keys(limit: int, using: str = "default") -> int:
    """Delete at most ``limit`` stored Idempotency-Key responses older than
    IDEMPOTENCY_TTL_S, which are replayed no more (jobs/api/idempotency.py), oldest first;
    returns how many went (fewer than ``limit``: none are left). Safe beside another
    dispatcher doing the same: a row goes once."""
    before = db_now(using) - seconds(conf.get("IDEMPOTENCY_TTL_S"))
    ids = list(IdempotencyKey.objects.using(using).filter(created_at__lt=before)
               .order_by("created_at").values_list("pk", flat=True)[:limit])
    if not ids:
        return 0
    return IdempotencyKey.objects.using(using).filter(pk__in=ids).delete()[0]


def _delete(cursor, model, where: str, ids: list[int]) -> int:
    """``DELETE FROM model WHERE where`` with ``{ids}`` the placeholders of ``ids``
    (``{table}``, ``{run}``, ``{attempt}``: table names); returns the rows deleted."""
    table = model._meta.db_table
    sql = f"DELETE FROM {table} WHERE " + where.format(
        ids=", ".join(["%s"] * len(ids)), table=table, run=Run._meta.db_table,
        attempt=Attempt._meta.db_table)
    cursor.execute(sql, ids)
    return cursor.rowcount
