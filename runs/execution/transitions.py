"""Run state transitions, each one fenced UPDATE (docs/architecture.md, "Run states and
transitions").

A transition names the state (and, for leased runs, the attempt number) it expects in its
WHERE clause, so a worker whose lease expired and whose run moved on cannot overwrite the
newer attempt's outcome: its UPDATE matches no row and the caller learns the lease was
stale. All functions take ``using``, the database alias, and run on the database clock.
The ack, complete(), is runs/execution/completion.py; it uses the fencing helpers here.
"""

import json
from collections.abc import Callable, Iterable
from datetime import datetime

from django.db import connections, transaction
from django.db.models import F, Q

from jobs.models import Job
from runs.alerts.policy import alert_dead
from runs.clock import db_now, from_us, seconds
from runs.execution import expiry, hooks, retry
from runs.execution.outcomes import after_reap
from runs.models import (
    PENDING_STATES,
    Attempt,
    AttemptOutcome,
    Run,
    RunState,
)
from runs.types import Lease, RunRef
from scheduler_core import conf

LOG_MESSAGE_MAX = 10_000
ERROR_MAX = 100_000


def storable(text: str, limit: int = ERROR_MAX) -> str:
    """``text`` as PostgreSQL can store it: NUL characters (refused by text columns) shown
    as ``\\x00``, lone surrogates replaced, cut to ``limit`` characters."""
    text = str(text).replace("\x00", "\\x00")[:limit]
    return text.encode("utf-8", "replace").decode("utf-8")


def in_shards(queryset, shards: list[int] | None):
    """The runs of ``queryset`` in ``shards`` (None: all). A shard is matched by its
    number modulo SHARDS, so runs left in a shard above a lowered SHARDS still belong to
    the dispatcher holding that remainder."""
    if shards is None:
        return queryset
    total = max(conf.get("SHARDS"), 1)
    return queryset.alias(shard_part=F("shard") % total).filter(shard_part__in=shards)


def run_refs(queryset) -> list[RunRef]:
    """RunRefs for the runs of ``queryset`` (one query)."""
    return [
        RunRef(id=r[0], queue=r[1], shard=r[2], priority=r[3], run_at=r[4], owner=r[5])
        for r in queryset.values_list("id", "queue", "shard", "priority", "run_at",
                                      "job__owner_id")
    ]


def lease_match(leases: Iterable[Lease], run_field: str = "pk",
                 number_field: str = "attempt") -> Q:
    """Rows matching any of ``leases`` by (run, attempt number): runs by default, or
    attempts with ``run_field="run_id", number_field="number"``."""
    match = Q(pk__in=[])
    for lease in leases:
        match |= Q(**{run_field: lease.run_id, number_field: lease.attempt})
    return match


def one_statement(using: str) -> bool:
    """Whether start_attempts and a success-only complete are each one statement on
    ``using`` (PostgreSQL), atomic without a transaction of their own."""
    return connections[using].vendor == "postgresql"


def start_attempts(ids: list[int], worker_id: str, ttl_s: float, using: str) -> list[Lease]:
    """Lease the pending runs among ``ids`` to ``worker_id`` for ``ttl_s`` seconds.

    One UPDATE moves each still-pending run of an active job to ``running`` and bumps its
    attempt number (the new fencing token); runs that are no longer pending, or whose job is
    paused or cancelled, are left alone and not returned. Creates one Attempt row per lease.
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
    paused meanwhile is not started."""
    sql, params = start_statement(ids, worker_id, ttl_s)
    with connections[using].cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    if len(rows) < len(ids):  # rare: only then can a run have been refused as expired
        expiry.expire_refused_pg(sorted(set(ids) - {r[0] for r in rows}), using)
    # Times come as integer microseconds (parsing two timestamps per run cost more than
    # the rest of the row); every lease of the statement expires at the same instant.
    lapses = {us: from_us(us) for us in {r[4] for r in rows}}
    return [
        Lease(r[0], r[1], r[2], r[3], lapses[r[4]],
              task={"job_id": r[5], "scheduled_at_us": r[6], "handler": r[7],
                    # JSON text (Django loads jsonb as text for JSONField to decode): the
                    # worker's child decodes it (runs/worker/lease_ahead.py, Leased).
                    "payload": r[8] if isinstance(r[8], str) else json.dumps(r[8]),
                    "timeout_s": r[9], "max_attempts": r[10], "retry": r[11],
                    "trace": r[12]})
        for r in rows
    ]


def start_statement(ids: list[int], worker_id: str, ttl_s: float) -> tuple[str, list]:
    """The SQL and parameters of _start_attempts_pg (PostgreSQL)."""
    run, attempt, job = Run._meta.db_table, Attempt._meta.db_table, Job._meta.db_table
    # A run of an active job past its expiry is not started: its fate (runs/execution/expiry.py)
    # is 'expired', not the job's status; the caller ends it expired afterwards, in a
    # statement only a refused run costs (a second walk over the ids in this one cost a
    # third of a lease).
    sql = f"""
        WITH t AS (SELECT clock_timestamp() AS now),
        started AS (
            UPDATE {run} SET state = %s, attempt = {run}.attempt + 1, worker_id = %s,
                lease_expires_at = t.now + %s * interval '1 second', started_at = t.now
            FROM t
            WHERE {run}.id = ANY(%s::bigint[]) AND ({run}.state || '') = ANY(%s)
              AND {expiry.fate_sql(run, job)} = %s
            RETURNING {run}.id, {run}.attempt, {run}.queue, {run}.shard,
                      {run}.started_at, {run}.lease_expires_at, {run}.job_id,
                      {run}.scheduled_at, {run}.trace_context
        ),
        attempts AS (
            INSERT INTO {attempt} (run_id, run_scheduled_at, number, worker_id,
                                   started_at, outcome, error)
            SELECT id, scheduled_at, attempt, %s, started_at, %s, '' FROM started
        )
        SELECT s.id, s.attempt, s.queue, s.shard,
               (EXTRACT(EPOCH FROM s.lease_expires_at) * 1000000)::bigint, s.job_id,
               (EXTRACT(EPOCH FROM s.scheduled_at) * 1000000)::bigint,
               j.handler, j.payload, j.timeout_s, j.max_attempts, j.retry, s.trace_context
        FROM started s
        CROSS JOIN LATERAL (SELECT handler, payload, timeout_s, max_attempts, retry
                            FROM {job}
                            WHERE id = s.job_id OFFSET 0) AS j"""
    return sql, [RunState.RUNNING, worker_id, ttl_s, int_array(ids),
                 [str(s) for s in PENDING_STATES], Job.Status.ACTIVE, worker_id,
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


def fail_runs(rows, outcome: str, errors: dict[int, str], now: datetime, using: str,
              fates: dict[int, str] | None = None,
              asked: dict[int, float | bool | None] | None = None) -> list[int]:
    """Move failed leased runs to ``retrying`` (run_at = now + backoff) or ``dead``.

    ``rows`` are ``(run_id, attempt, max_attempts)`` of runs known to be running under that
    attempt; each UPDATE is fenced on it. Records ``outcome`` on the attempt, and raises
    the owners' dead-letter alerts (docs/alerts.md). Returns the ids of runs that will be
    retried (the caller pushes them to the broker after commit); ``fates``, when given,
    gets run id -> "retrying", "dead" or "cancelled" for each run changed. ``asked`` maps
    a run id to what its handler asked (runs/types.py, Outcome.retry): a delay in seconds
    replaces the backoff (capped at RETRY_BACKOFF_CAP_S), False sends the run to the dead
    letter now, the names of the exception's classes are matched against the job's
    retry_on / never_retry_on. Otherwise the job's retry strategy (runs/execution/retry.py) gives
    the delay, on the database clock (``now``).
    """
    base, cap = conf.get("RETRY_BACKOFF_BASE_S"), conf.get("RETRY_BACKOFF_CAP_S")
    runs = Run.objects.using(using)
    policies = {run_id: retry.stored(policy, job_id) for run_id, job_id, policy in
                runs.filter(pk__in=[row[0] for row in rows], job__retry__isnull=False)
                .values_list("id", "job_id", "job__retry")}
    retried, dead = [], []
    for run_id, attempt, max_attempts in rows:
        error = errors.get(run_id, "")
        fenced = runs.filter(pk=run_id, attempt=attempt, state=RunState.RUNNING)
        wish, policy = (asked or {}).get(run_id), policies.get(run_id)
        if isinstance(wish, (tuple, list)):  # a plain exception: the job's lists decide
            refused = retry.refusal(policy, tuple(wish))
            wish = None
            if refused:
                error, wish = f"{error} ({refused})", False
        error = storable(error)
        if attempt >= max_attempts or wish is False:
            changed = fenced.update(
                state=RunState.DEAD, finished_at=now, error=error, lease_expires_at=None
            )
            if changed:
                dead.append((run_id, attempt, error))
        else:
            delay = retry.delay_s(policy, attempt, base, cap) if wish is None \
                else min(max(wish, 0), cap)
            changed = fenced.update(
                state=RunState.RETRYING,
                run_at=now + seconds(delay),
                error=error,
                lease_expires_at=None,
            )
            if changed:
                retried.append(run_id)
        if changed:
            Attempt.objects.using(using).filter(run_id=run_id, number=attempt).update(
                finished_at=now, outcome=outcome, error=error
            )
    if dead:
        alert_dead(dead, now, using)
        hooks.notify(hooks.DEAD, [run_id for run_id, _, _ in dead], now, using)
    gone = _cancel_for_cancelled_jobs(retried, now, using)
    if fates is not None:
        fates.update({run_id: "dead" for run_id, _, _ in dead})
        fates.update({run_id: "cancelled" if run_id in gone else "retrying"
                      for run_id in retried})
    return [i for i in retried if i not in gone]


def _cancel_for_cancelled_jobs(run_ids: list[int], now: datetime, using: str) -> set[int]:
    """Runs sent back to pending whose job was cancelled meanwhile would wait forever (a
    cancelled job's runs are never leased): cancel them now. Returns their ids."""
    if not run_ids:
        return set()
    cancelled_jobs = Job.objects.using(using).filter(status=Job.Status.CANCELLED).values("pk")
    runs = Run.objects.using(using).filter(
        pk__in=run_ids, state__in=PENDING_STATES, job_id__in=cancelled_jobs)
    ids = set(runs.values_list("pk", flat=True))
    runs.filter(pk__in=ids).update(state=RunState.CANCELLED, finished_at=now)
    return ids


def release(leases: list[Lease], using: str) -> list[int]:
    """Give leased runs back at once without counting the attempt (graceful shutdown).

    Each run goes back to ``queued`` with run_at = now; its ``max_attempts`` grows by one
    so the released attempt does not use up a retry. Returns the ids released.
    A fixed number of statements whatever the number of leases (a worker stopping
    releases up to its whole lease-ahead, 514 runs: two UPDATEs per run took 1.4 s): the
    runs held under the lease's attempt are locked first (held_runs), so the fence holds for
    the UPDATEs by id.
    """
    if not leases:
        return []
    with transaction.atomic(using=using):
        now = db_now(using)
        held = held_runs(leases, using)
        ids = [key[0] for key in held]
        Run.objects.using(using).filter(pk__in=ids).update(
            state=RunState.QUEUED, run_at=now, lease_expires_at=None,
            max_attempts=F("max_attempts") + 1,
        )
        # A released run keeps its attempt number: the attempt to close is the run's own.
        Attempt.objects.using(using).filter(run_id__in=ids, number=F("run__attempt")).update(
            finished_at=now, outcome=AttemptOutcome.RELEASED)
        released = list(dict.fromkeys(lease.run_id for lease in leases
                                      if (lease.run_id, lease.attempt) in held))
        gone = _cancel_for_cancelled_jobs(released, now, using)
    return [i for i in released if i not in gone]


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


def cancelled_under(leases: list[Lease], using: str,
                    then: Callable[[list[Lease]], None] | None = None) -> set[int]:
    """The ids of the runs of ``leases`` cancelled while held under that lease (one read
    by primary key). No attempt of theirs has started since (a requeued run's next lease
    takes a new attempt number), so no other worker holds them. ``then`` (optional) is
    called with those leases in a transaction that holds their rows locked (FOR UPDATE),
    so none of them is requeued, nor leased again, before it returns; read first without
    a transaction, as most refused acks are of lapsed leases, none cancelled."""
    wanted = {(lease.run_id, lease.attempt) for lease in leases}
    rows = (Run.objects.using(using)
            .filter(pk__in=[key[0] for key in wanted], state=RunState.CANCELLED))
    gone = {row[0] for row in rows.values_list("pk", "attempt") if tuple(row) in wanted}
    if then is None or not gone:
        return gone
    with transaction.atomic(using=using):
        rows = rows.filter(pk__in=gone).order_by("pk").select_for_update()
        gone = {row[0] for row in rows.values_list("pk", "attempt") if tuple(row) in wanted}
        if gone:
            then([lease for lease in leases if lease.run_id in gone])
    return gone


def expire_leases(limit: int, using: str, shards: list[int] | None = None) -> list[int]:
    """Handle up to ``limit`` runs whose lease expired on the database clock: retry with
    backoff, or dead-letter after max_attempts; the attempt is recorded as
    ``lease_expired``. ``shards`` restricts it to runs of those shards (a dispatcher's own;
    None: all). Safe to run from several dispatchers (SKIP LOCKED where supported).
    Returns the ids to push back to the broker after commit."""
    expired = in_shards(Run.objects.using(using).filter(state=RunState.RUNNING), shards)
    with transaction.atomic(using=using):
        now = db_now(using)
        rows = list(
            expired.filter(lease_expires_at__lt=now)
            .select_for_update(skip_locked=True)
            .values_list("id", "attempt", "max_attempts", "worker_id", "queue")[:limit]
        )
        if not rows:
            return []
        errors = {
            r[0]: f"lease expired: worker {r[3]} stopped heartbeating during attempt {r[1]}"
            for r in rows
        }
        fates: dict[int, str] = {}
        retried = fail_runs([(r[0], r[1], r[2]) for r in rows], AttemptOutcome.LEASE_EXPIRED,
                            errors, now, using, fates)
        transaction.on_commit(lambda: after_reap(rows, fates, errors), using=using)
        return retried

