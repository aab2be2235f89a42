"""The run's lease (docs/architecture.md, "Vocabulary" and "Run states and transitions"):
taken (start_attempts: pending runs move to ``running`` under a worker, each attempt
number bumped, the fencing token, and an Attempt row each), extended (extend_leases, at
each heartbeat), and matched under its fence (lease_match, held_runs: a run still running
under that attempt). The ack, complete(), is runs/execution/completion.py; the lease's
other ends (released, expired, the retry or dead letter after them) are
runs/execution/transitions.py. All functions take ``using``, the database alias, and run
on the database clock.
"""

import json
import logging
import time
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from django.db import Error as DjangoDbError
from django.db import connections, transaction
from django.db.models import F, Q

from jobs.models import Job
from runs.clock import db_now, from_us, seconds
from runs.execution import expiry
from runs.history.time_partitions import floor_to_width, partitioned
from runs.models import PENDING_STATES, Attempt, AttemptOutcome, Run, RunState
from runs.types import Lease
from scheduler_core import conf, prepared

log = logging.getLogger("scheduler.broker")

# The most a run may be leased before its run_at (Broker.promote's ``within_s``): its
# attempt starts at its run_at, and the worker's child waits for it (runs/worker/child.py).
EARLY_MAX_S = 0.05


def lease_match(leases: Iterable[Lease], run_field: str = "pk",
                 number_field: str = "attempt") -> Q:
    """Rows matching any of ``leases`` by (run, attempt number): runs by default, or
    attempts with ``run_field="run_id", number_field="number"``."""
    match = Q(pk__in=[])
    for lease in leases:
        match |= Q(**{run_field: lease.run_id, number_field: lease.attempt})
    return match


def one_statement(using: str) -> bool:
    """Whether start_attempts and a success-only complete need no transaction of their own
    on ``using`` (PostgreSQL): each is one statement, atomic alone, except a lease whose
    ids are not all recent, which takes a second (_start_attempts_pg; PartlyStarted)."""
    return connections[using].vendor == "postgresql"


class PartlyStarted(Exception):
    """Raised by start_attempts outside a transaction when its second statement failed
    (_start_attempts_pg): the first one's ``leases`` were committed and stand; the runs of
    ``unstarted`` (ids) were not started. The cause is the exception's __cause__."""

    def __init__(self, leases: list[Lease], unstarted: list[int]):
        super().__init__(f"{len(unstarted)} runs not started")
        self.leases, self.unstarted = leases, unstarted


def start_attempts(ids: list[int], worker_id: str, ttl_s: float, using: str) -> list[Lease]:
    """Lease the pending runs among ``ids`` to ``worker_id`` for ``ttl_s`` seconds.

    One UPDATE moves each still-pending run of an active job to ``running`` and bumps its
    attempt number (the new fencing token); runs that are no longer pending, or whose job is
    paused or cancelled, are left alone and not returned. Creates one Attempt row per lease.
    On PostgreSQL a run leased before its run_at (Broker.promote's ``within_s``, at most
    EARLY_MAX_S ahead) starts its attempt at its run_at; the lease's task then holds
    ``not_before``, that instant by this host's clock (time.time()) at the latest, for
    the child, and ``run_at_us``, the same on the database clock.
    Must be called inside a transaction on ``using`` unless ``one_statement(using)``.
    """
    if not ids:
        return []
    if connections[using].vendor == "postgresql":
        return _start_attempts_pg(ids, worker_id, ttl_s, using)
    now = db_now(using)
    expires = now + seconds(ttl_s)
    runs = Run.objects.using(using)
    # job_id IN (subquery), not job__status: a join would make Django wrap the whole filter
    # in "id IN (SELECT ...)", and PostgreSQL re-checks only the outer WHERE after waiting
    # on a row lock, so a second worker could start a run the first had just started.
    active_jobs = Job.objects.using(using).filter(status=Job.Status.ACTIVE).values("pk")
    gone = expiry.expire_due(runs.filter(pk__in=ids, state__in=PENDING_STATES,
                                   job_id__in=active_jobs), now, using)
    runs.filter(pk__in=ids, state__in=PENDING_STATES, job_id__in=active_jobs).exclude(
        pk__in=gone).update(
        state=RunState.RUNNING,
        attempt=F("attempt") + 1,
        worker_id=worker_id,
        lease_expires_at=expires,
        started_at=now,
    )
    rows = runs.filter(
        pk__in=ids, state=RunState.RUNNING, worker_id=worker_id, lease_expires_at=expires
    ).values_list("id", "attempt", "queue", "shard", "scheduled_at")
    leases = [Lease(r[0], r[1], r[2], r[3], expires) for r in rows]
    Attempt.objects.using(using).bulk_create(
        [
            Attempt(run_id=r[0], run_scheduled_at=r[4], number=r[1], worker_id=worker_id,
                    started_at=now)
            for r in rows
        ]
    )
    return leases


def _start_attempts_pg(ids: list[int], worker_id: str, ttl_s: float,
                       using: str) -> list[Lease]:
    """start_attempts in one round trip: the same fenced UPDATE, the Attempt rows inserted
    from its RETURNING, the jobs' handler and payload read, on one database clock reading.

    The plan must stay a walk over ``ids``, whatever the statistics say (BENCHMARKS.md):
    the state fence is written so no index on ``state`` can serve it (with statistics from
    a history of finished runs, PostgreSQL took a burst of pending runs for a handful and
    scanned them all on every lease), and the job is looked up per run in subqueries the
    planner cannot turn into a hash join over every job. Being in the WHERE clause, the
    job's status is re-checked after a wait on a row lock (EvalPlanQual), so a run of a job
    paused meanwhile is not started.

    Redis hands the worker run ids only, and a lookup by id alone reads every time
    partition of the runs table, each for about 0.25 ms a lease of 500 however few rows
    it holds (docs/performance.md, "Partitions and the ack"). So on partitioned history
    the statement first takes the runs of yesterday's and today's partitions
    (recent_span), and only the ids it left, if any, in a second one over every partition
    (a backlog or a retry from before yesterday, a workflow node of an older workflow run,
    a run scheduled after today, a stale id). Inside a transaction the two are atomic
    together; outside one, a failure of the second raises PartlyStarted with the first's
    leases, which are committed. Ending refused runs expired is then best effort: they
    are still pending, and a later lease refuses and ends them."""
    span = recent_span() if _partitioned(using) else None
    rows, received = _start_rows(ids, worker_id, ttl_s, using, span)
    leases = _leases(rows, received)
    left = set(ids) - {r[0] for r in rows}
    alone = not connections[using].in_atomic_block
    if left and span is not None:
        try:
            rows, received = _start_rows(sorted(left), worker_id, ttl_s, using, None)
        except DjangoDbError as exc:
            if not alone:
                raise
            raise PartlyStarted(leases, sorted(left)) from exc
        leases += _leases(rows, received)
        left -= {r[0] for r in rows}
    if left:  # rare: only then can a run have been refused as expired
        try:
            expiry.expire_refused_pg(sorted(left), using)
        except DjangoDbError as exc:
            if not alone:
                raise
            log.warning("lease: refused runs not ended expired, left for a later lease: %s",
                        exc)
    return leases


def _leases(rows: list[tuple], received: float) -> list[Lease]:
    """The leases of a lease statement's ``rows``, whose reply came at ``received``
    (time.time())."""
    # Times come as integer microseconds (parsing two timestamps per run cost more than
    # the rest of the row); every lease of the statement expires at the same instant.
    lapses = {us: from_us(us) for us in {r[4] for r in rows}}
    # A run leased before its run_at waits in the child until then, measured from the
    # reply by this host's clock: the database's wait, so no clock skew can make it
    # start early.
    return [
        Lease(r[0], r[1], r[2], r[3], lapses[r[4]],
              task={"job_id": r[5], "scheduled_at_us": r[6], "handler": r[7],
                    # JSON text (Django loads jsonb as text for JSONField to decode): the
                    # worker's child decodes it (runs/worker/lease_ahead.py, Leased).
                    "payload": r[8] if isinstance(r[8], str) else json.dumps(r[8]),
                    "timeout_s": r[9], "max_attempts": r[10], "retry": r[11],
                    "trace": r[12],
                    "not_before": received + r[13] / 1e6 if r[13] > 0 else None,
                    "run_at_us": r[14] if r[13] > 0 else None})
        for r in rows
    ]


# Database alias -> whether its history tables are partitioned (set at migration, 0010).
_PARTITIONED: dict[str, bool] = {}


def _partitioned(using: str) -> bool:
    if using not in _PARTITIONED:
        _PARTITIONED[using] = partitioned(using)
    return _PARTITIONED[using]


def _start_rows(ids: list[int], worker_id: str, ttl_s: float, using: str,
                span: tuple[datetime, datetime] | None) -> tuple[list[tuple], float]:
    """The rows of one lease statement, and when they came (time.time())."""
    sql, params = start_statement(ids, worker_id, ttl_s, span)
    with prepared.cursor(connections[using]) as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall(), time.time()


def recent_span(now: datetime | None = None) -> tuple[datetime, datetime]:
    """The ``scheduled_at`` span [from, to) a lease reads first: the history partitions
    of yesterday and today (HISTORY_PARTITION_S wide; ``now`` by this host's clock by
    default: the span only decides which partitions are read first). PostgreSQL leaves
    out every other partition, and the DEFAULT one too once both exist (from the second
    day of a new database)."""
    # Not width_s(), which raises on a width under a minute: a worker that skipped the
    # start's checks (scheduler.E011) still leases, reading more partitions than it needs.
    width = conf.get("HISTORY_PARTITION_S") or 86_400
    start = floor_to_width(now or datetime.now(UTC), width)
    return start - timedelta(seconds=width), start + timedelta(seconds=width)


def start_statement(ids: list[int], worker_id: str, ttl_s: float,
                    span: tuple[datetime, datetime] | None = None) -> tuple[str, list]:
    """The SQL and parameters of _start_attempts_pg (PostgreSQL); with ``span``, only
    runs whose ``scheduled_at`` is in [span[0], span[1]) are started."""
    run, attempt, job = Run._meta.db_table, Attempt._meta.db_table, Job._meta.db_table
    # A run of an active job past its expiry is not started: its fate (runs/execution/expiry.py)
    # is 'expired', not the job's status; the caller ends it expired afterwards, in a
    # statement only a refused run costs (a second walk over the ids in this one cost a
    # third of a lease).
    within = (f" AND {run}.scheduled_at >= %s AND {run}.scheduled_at < %s"
              if span is not None else "")
    sql = f"""
        WITH t AS (SELECT clock_timestamp() AS now),
        started AS (
            UPDATE {run} SET state = %s, attempt = {run}.attempt + 1, worker_id = %s,
                lease_expires_at = t.now + %s * interval '1 second',
                started_at = GREATEST(t.now, LEAST({run}.run_at,
                                                   t.now + %s * interval '1 second'))
            FROM t
            WHERE {run}.id = ANY(%s::bigint[]){within} AND ({run}.state || '') = ANY(%s)
              AND {expiry.fate_sql(run, job)} = %s
            RETURNING {run}.id, {run}.attempt, {run}.queue, {run}.shard,
                      {run}.started_at, {run}.lease_expires_at, {run}.job_id,
                      {run}.scheduled_at, {run}.trace_context, t.now AS leased_at
        ),
        attempts AS (
            INSERT INTO {attempt} (run_id, run_scheduled_at, number, worker_id,
                                   started_at, outcome, error)
            SELECT id, scheduled_at, attempt, %s, started_at, %s, '' FROM started
        )
        SELECT s.id, s.attempt, s.queue, s.shard,
               (EXTRACT(EPOCH FROM s.lease_expires_at) * 1000000)::bigint, s.job_id,
               (EXTRACT(EPOCH FROM s.scheduled_at) * 1000000)::bigint,
               j.handler, j.payload, j.timeout_s, j.max_attempts, j.retry, s.trace_context,
               (EXTRACT(EPOCH FROM s.started_at - s.leased_at) * 1000000)::bigint,
               (EXTRACT(EPOCH FROM s.started_at) * 1000000)::bigint
        FROM started s
        CROSS JOIN LATERAL (SELECT handler, payload, timeout_s, max_attempts, retry
                            FROM {job}
                            WHERE id = s.job_id OFFSET 0) AS j"""
    return sql, [RunState.RUNNING, worker_id, ttl_s, EARLY_MAX_S, int_array(ids),
                 *(span or ()), [str(s) for s in PENDING_STATES], Job.Status.ACTIVE, worker_id,
                 AttemptOutcome.RUNNING]


def int_array(values: list[int]) -> str:
    """``values`` as a PostgreSQL array literal, for a ``%s::bigint[]`` parameter: psycopg
    adapts a list element by element in Python, a cost paid per run on every lease and
    ack (BENCHMARKS.md)."""
    return "{" + ",".join(str(int(v)) for v in values) + "}"


def extend_leases(leases: list[Lease], ttl_s: float, using: str) -> list[Lease]:
    """Push the expiry of every lease still held to now + ``ttl_s``; return those leases
    (with their new expiry). A lease missing from the result was lost (fencing). Two
    statements whatever the number of leases (held_runs)."""
    if not leases:
        return []
    with transaction.atomic(using=using):
        now = db_now(using)
        expires = now + seconds(ttl_s)
        held = held_runs(leases, using)
        Run.objects.using(using).filter(pk__in=[key[0] for key in held]).update(
            lease_expires_at=expires)
    return [
        Lease(le.run_id, le.attempt, le.queue, le.shard, expires)
        for le in leases
        if (le.run_id, le.attempt) in held
    ]


def held_runs(leases: list[Lease], using: str, *fields: str) -> dict[tuple[int, int], tuple]:
    """The ``leases`` whose run is still running under that attempt, locked FOR UPDATE
    (call inside a transaction): (run id, attempt) -> the run's ``fields``. id IN (...)
    and the attempt compared here, in one query: an OR of (id AND attempt) pairs costs
    more to build and plan than the rows it reads. A row of a newer attempt is locked too
    but left alone."""
    wanted = {(lease.run_id, lease.attempt) for lease in leases}
    rows = (Run.objects.using(using)
            .filter(pk__in=[key[0] for key in wanted], state=RunState.RUNNING)
            .select_for_update().values_list("id", "attempt", *fields))
    return {(row[0], row[1]): row[2:] for row in rows if (row[0], row[1]) in wanted}
