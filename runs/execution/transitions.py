"""Run state transitions, each one fenced UPDATE (docs/architecture.md, "Run states and
transitions").

A transition names the state (and, for leased runs, the attempt number) it expects in its
WHERE clause, so a worker whose lease expired and whose run moved on cannot overwrite the
newer attempt's outcome: its UPDATE matches no row and the caller learns the lease was
stale. All functions take ``using``, the database alias, and run on the database clock.
Here: a failed attempt's retry or dead letter (fail_runs), a lease given back (release)
or expired (expire_leases), a run cancelled under its lease. The lease itself (taken,
extended, fenced) is runs/execution/leases.py; the ack, complete(),
runs/execution/completion.py.
"""

from collections.abc import Callable
from datetime import datetime

from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Greatest

from jobs.models import Job
from runs.alerts.policy import alert_dead
from runs.clock import db_now, seconds
from runs.execution import hooks, retry
from runs.execution.leases import held_runs
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

    Each run goes back to ``queued`` with run_at = now (or its own, if later: leased
    early, runs/worker/lease_ahead.py); its ``max_attempts`` grows by one
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
            # A run leased before its run_at keeps it (runs/worker/lease_ahead.py, lease_at).
            state=RunState.QUEUED, run_at=Greatest(F("run_at"), Value(now)),
            lease_expires_at=None,
            max_attempts=F("max_attempts") + 1,
        )
        # A released run keeps its attempt number: the attempt to close is the run's own.
        Attempt.objects.using(using).filter(run_id__in=ids, number=F("run__attempt")).update(
            finished_at=now, outcome=AttemptOutcome.RELEASED)
        released = list(dict.fromkeys(lease.run_id for lease in leases
                                      if (lease.run_id, lease.attempt) in held))
        gone = _cancel_for_cancelled_jobs(released, now, using)
    return [i for i in released if i not in gone]


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

