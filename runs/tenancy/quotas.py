"""Per-owner quotas and bounds as stored (docs/isolation.md, "Tenant bounds"): an owner's
Bounds (its OwnerPolicy, or the settings defaults) and the checks of the two quotas,
``max_jobs`` and ``max_pending``. They live in the engine because the engine's own
operations that add pending runs (runs/services.py's requeue: a retry, a dead letter
requeued from the API, the admin or ``manage.py deadletter``) must keep to
``max_pending`` too, and runs imports nothing of jobs but its models (docs/architecture.md,
"Code layout"); jobs/tenants.py re-exports them beside the rest of the tenant rules."""

from collections.abc import Callable
from dataclasses import dataclass

from django.db import connections

from jobs.models import Job, OwnerPolicy
from runs.execution import hooks
from runs.models import PENDING_STATES, Run
from scheduler_core import conf
from scheduler_core.exceptions import SchedulerError

SHARED_QUEUE = "default"
MAX_INT = 2**31 - 1  # PositiveIntegerField's range
# Field -> (lowest, highest) value a policy may hold, and the setting its null stands for.
POLICY_FIELDS = {
    "max_running": (1, MAX_INT, "OWNER_CONCURRENCY"),
    "max_pending": (1, MAX_INT, "OWNER_MAX_PENDING"),
    "max_jobs": (1, MAX_INT, "OWNER_MAX_JOBS"),
    "highest_priority": (0, 9, "OWNER_HIGHEST_PRIORITY"),
    "max_timeout_s": (1, MAX_INT, "OWNER_MAX_TIMEOUT_S"),
    "max_attempts": (1, 32_767, "OWNER_MAX_ATTEMPTS"),
    "max_map_items": (1, MAX_INT, "OWNER_MAX_MAP_ITEMS"),
}
QUOTA_LOCK = 0x7175  # advisory lock class of the per-owner quota checks ("qu")


class QuotaExceeded(SchedulerError):
    """Storing the request would take an owner over a quota. ``limit`` names the policy
    field (``max_jobs`` or ``max_pending``), ``value`` is the quota in force. Nothing was
    stored."""

    def __init__(self, limit: str, value: int, message: str):
        self.limit, self.value = limit, value
        super().__init__(message)


@dataclass(frozen=True)
class Bounds:
    """The bounds in force for one owner. Counts and caps of 0 mean none;
    ``highest_priority`` 0 allows every priority. ``queues`` are the queue names the
    owner may use: the shared "default", its default queue and the queues it was given."""

    owner_id: int
    max_running: int
    max_pending: int
    max_jobs: int
    highest_priority: int
    max_timeout_s: int
    max_attempts: int
    queues: frozenset[str]
    default_queue: str
    max_map_items: int = 1000  # items of one mapped workflow node (docs/workflows.md)


def bounds_from(owner_id: int, policy: OwnerPolicy | None) -> Bounds:
    """The Bounds of ``owner_id`` given its policy row (None: it has none)."""
    values = {}
    for field, (_, _, setting) in POLICY_FIELDS.items():
        own = getattr(policy, field) if policy is not None else None
        values[field] = own if own is not None else conf.get(setting)
    default_queue = (policy.default_queue if policy is not None else "") or SHARED_QUEUE
    given = policy.queue_names if policy is not None else []
    return Bounds(owner_id=owner_id, queues=frozenset([SHARED_QUEUE, default_queue, *given]),
                  default_queue=default_queue, **values)


def bounds_of(owner_id: int | None, using: str = "default") -> Bounds | None:
    """The Bounds of ``owner_id`` (one query), or None for a job without an owner."""
    if owner_id is None:
        return None
    policy = OwnerPolicy.objects.using(using).filter(owner_id=owner_id).first()
    return bounds_from(owner_id, policy)


def _count_upto(queryset, cap: int) -> tuple[int, str]:
    """``queryset.count()``, but reading at most ``cap + 1`` rows; with the count in words
    ("more than <cap>" when it stopped there)."""
    count = queryset.values("pk")[:cap + 1].count()
    return count, (f"more than {cap}" if count > cap else str(count))


def check_quotas(bounds: Bounds, new_jobs: int, new_runs: int, using: str = "default",
                 promised: Callable[[Bounds, str], int] = hooks.promised) -> None:
    """Raise QuotaExceeded if ``new_jobs`` more jobs or ``new_runs`` more pending runs
    would take the owner over ``max_jobs`` (its jobs that are not cancelled) or
    ``max_pending`` (its runs scheduled, queued or retrying, plus ``promised(bounds,
    using)``: the runs an app above the engine has already admitted and will make later,
    e.g. the nodes not yet started of its live workflow runs; by default what the run
    listeners promise, runs/execution/hooks.py, so that no way of making runs forgets them: a job
    create, bulk create, trigger and resume that did let a tenant go about 2x over
    ``max_pending``). Inside a transaction on
    PostgreSQL it first takes a transaction-scoped advisory lock per owner, so that two
    racing requests of one owner cannot both pass and overshoot the quota (SQLite
    serialises writers anyway)."""
    check_jobs = bool(bounds.max_jobs and new_jobs)
    check_runs = bool(bounds.max_pending and new_runs)
    if not (check_jobs or check_runs):
        return
    _lock(bounds, using)
    if check_jobs:
        cap = bounds.max_jobs
        live = Job.objects.using(using).filter(
            owner_id=bounds.owner_id, status__in=[Job.Status.ACTIVE, Job.Status.PAUSED])
        have, words = _count_upto(live, cap)
        if have + new_jobs > cap:
            raise QuotaExceeded("max_jobs", cap, (
                f"jobs quota: this owner may have at most {cap} jobs that are not "
                f"cancelled (max_jobs); it has {words} and this request adds {new_jobs}"))
    if check_runs:
        have, words = _pending(bounds, using)
        if have <= bounds.max_pending:
            if later := promised(bounds, using):
                have, words = have + later, f"{have + later} ({later} of them not yet made)"
        if have + new_runs > bounds.max_pending:
            raise _over_pending(bounds.max_pending, words, new_runs)


def _lock(bounds: Bounds, using: str) -> None:
    connection = connections[using]
    if connection.vendor == "postgresql" and connection.in_atomic_block:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)",
                           [QUOTA_LOCK, bounds.owner_id % MAX_INT])


def _pending(bounds: Bounds, using: str) -> tuple[int, str]:
    pending = Run.objects.using(using).filter(job__owner_id=bounds.owner_id,
                                              state__in=PENDING_STATES)
    return _count_upto(pending, bounds.max_pending)


def pending_load(bounds: Bounds, using: str = "default",
                 promised: Callable[[Bounds, str], int] = hooks.promised) -> tuple[int, int]:
    """What ``max_pending`` counts for the owner of ``bounds``, exactly (no cap): (its runs
    scheduled, queued or retrying, the runs ``promised`` and not yet made). Their sum is
    the figure check_quotas compares with the quota, for GET /api/limits/ to show."""
    made = Run.objects.using(using).filter(job__owner_id=bounds.owner_id,
                                           state__in=PENDING_STATES).count()
    return made, promised(bounds, using)


def _over_pending(cap: int, words: str, adds: int) -> QuotaExceeded:
    return QuotaExceeded("max_pending", cap, (
        f"pending runs quota: this owner may have at most {cap} runs waiting to "
        f"run (max_pending); it has {words} and this request adds {adds}"))


def fit_pending(owned: list[tuple[int, int | None]], using: str = "default",
                revives: dict[int, int] | None = None,
                promised: Callable[[Bounds, str], int] = hooks.promised,
                ) -> tuple[list[int], QuotaExceeded | None]:
    """Which of the runs ``owned`` ((run id, owner id or None) pairs) may become pending
    without taking their owner over ``max_pending``: per owner, the lowest ids while they
    fit in the room left (runs without an owner always fit). A run costs itself plus
    ``revives[run id]``, the runs an app above will make of it in time (a workflow node's
    descendants); the room is ``max_pending`` less the owner's pending runs and
    ``promised(bounds, using)`` (as check_quotas). Returns (ids that fit, the
    QuotaExceeded of the first owner some of whose runs did not, or None). Call it
    inside the transaction that makes them pending: it takes check_quotas' lock per
    owner."""
    revives = revives or {}
    by_owner: dict[int | None, list[int]] = {}
    for run_id, owner_id in sorted(owned, key=lambda pair: pair[0]):
        by_owner.setdefault(owner_id, []).append(run_id)
    fits: list[int] = []
    refused = None
    for owner_id, ids in by_owner.items():
        bounds = bounds_of(owner_id, using)
        if bounds is None or not bounds.max_pending:
            fits += ids
            continue
        _lock(bounds, using)
        have, words = _pending(bounds, using)
        if have <= bounds.max_pending:
            if later := promised(bounds, using):
                have, words = have + later, f"{have + later} ({later} of them not yet made)"
        room = max(bounds.max_pending - have, 0)
        costs = [1 + revives.get(run_id, 0) for run_id in ids]
        taken = 0
        while taken < len(ids) and costs[taken] <= room:
            room -= costs[taken]
            taken += 1
        fits += ids[:taken]
        if taken < len(ids) and refused is None:
            refused = _over_pending(bounds.max_pending, words, sum(costs))
    return fits, refused
