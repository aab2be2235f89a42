"""Per-owner bounds (docs/isolation.md, "Tenant bounds"): what one owner's jobs may ask for
(queue, priority, timeout_s, max_attempts) and how much the owner may hold (jobs, pending
runs). The Python API applies them whenever it is given an owner (jobs/services.py), and
so do the REST API and the admin, which call it. The concurrency bound, ``max_running``,
is enforced by the brokers at lease time (runs/limits.py syncs it to them).

Each bound is the owner's OwnerPolicy value, or the settings default when that is null;
jobs without an owner have none. Cheap on the hot path: one read of the policy per
request, and for a request that adds jobs or runs two counts that stop at the quota
(COUNT over at most quota + 1 rows), whatever the number of jobs in the request.
"""

from dataclasses import dataclass

from django.db import connections, transaction

from jobs.models import QUEUE_RE, Job, OwnerPolicy
from runs.models import PENDING_STATES, Run
from runs.services import sync_owner_limits
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


def _plain_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def field_problems(spec: dict, bounds: Bounds) -> dict[str, str]:
    """Field -> reason for each of ``spec``'s ``queue``, ``priority``, ``timeout_s`` and
    ``max_attempts`` (the keys of jobs/validation.py's validate_job) that ``bounds``
    forbid; a key absent or None is not checked. Each reason names the limit and its
    value."""
    errors = {}
    queue = spec.get("queue")
    if isinstance(queue, str) and queue and queue not in bounds.queues:
        errors["queue"] = (f"{queue!r} is not one of this owner's queues "
                           f"({', '.join(sorted(bounds.queues))}); an owner's queues are given "
                           f"in its policy (queues)")
    priority, top = spec.get("priority"), bounds.highest_priority
    if _plain_int(priority) and priority < top:
        errors["priority"] = (f"must be {top} or more (0 is most urgent): this owner's "
                              f"highest priority allowed (highest_priority) is {top}")
    timeout, longest = spec.get("timeout_s"), bounds.max_timeout_s
    if longest and _plain_int(timeout) and timeout > longest:
        errors["timeout_s"] = (f"must be at most {longest}: this owner's longest timeout "
                               f"(max_timeout_s) is {longest} s")
    payload = spec.get("payload")
    asked = payload.get("timeout_s") if isinstance(payload, dict) else None
    if (spec.get("handler") == "http" and longest and isinstance(asked, int | float)
            and not isinstance(asked, bool) and asked > longest):  # docs/http-handler.md
        errors["payload.timeout_s"] = (f"must be at most {longest}: this owner's longest "
                                       f"timeout (max_timeout_s) is {longest} s")
    attempts, most = spec.get("max_attempts"), bounds.max_attempts
    if most and _plain_int(attempts) and attempts > most:
        errors["max_attempts"] = (f"at most {most} attempts, first try included: this "
                                  f"owner's max_attempts is {most}")
    return errors


def _count_upto(queryset, cap: int) -> tuple[int, str]:
    """``queryset.count()``, but reading at most ``cap + 1`` rows; with the count in words
    ("more than <cap>" when it stopped there)."""
    count = queryset.values("pk")[:cap + 1].count()
    return count, (f"more than {cap}" if count > cap else str(count))


def check_quotas(bounds: Bounds, new_jobs: int, new_runs: int, using: str = "default") -> None:
    """Raise QuotaExceeded if ``new_jobs`` more jobs or ``new_runs`` more pending runs
    would take the owner over ``max_jobs`` (its jobs that are not cancelled) or
    ``max_pending`` (its runs scheduled, queued or retrying). Inside a transaction on
    PostgreSQL it first takes a transaction-scoped advisory lock per owner, so that two
    racing requests of one owner cannot both pass and overshoot the quota (SQLite
    serialises writers anyway)."""
    check_jobs = bool(bounds.max_jobs and new_jobs)
    check_runs = bool(bounds.max_pending and new_runs)
    if not (check_jobs or check_runs):
        return
    connection = connections[using]
    if connection.vendor == "postgresql" and connection.in_atomic_block:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)",
                           [QUOTA_LOCK, bounds.owner_id % MAX_INT])
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
        cap = bounds.max_pending
        pending = Run.objects.using(using).filter(job__owner_id=bounds.owner_id,
                                                  state__in=PENDING_STATES)
        have, words = _count_upto(pending, cap)
        if have + new_runs > cap:
            raise QuotaExceeded("max_pending", cap, (
                f"pending runs quota: this owner may have at most {cap} runs waiting to "
                f"run (max_pending); it has {words} and this request adds {new_runs}"))


def clean_policy(values: dict) -> dict:
    """Check the OwnerPolicy fields in ``values`` (any of POLICY_FIELDS: an int in range or
    None; ``queues``: a list of queue names or comma-separated text; ``default_queue``: a
    queue name or ""), returning them in the model's form. Raises SchedulerError naming
    the first bad field and value."""
    clean = {}
    for field, value in values.items():
        if field in POLICY_FIELDS:
            low, high, _ = POLICY_FIELDS[field]
            if value is not None and (not _plain_int(value) or not low <= value <= high):
                raise SchedulerError(f"{field} must be an integer from {low} to {high} or "
                                     f"null (the settings default), not {value!r}")
            clean[field] = value
        elif field == "queues":
            names = value.split(",") if isinstance(value, str) else value
            if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
                raise SchedulerError(f"queues must be a list of queue names, not {value!r}")
            names = [n.strip() for n in names if n.strip()]
            bad = [n for n in names if not QUEUE_RE.match(n)]
            if bad:
                raise SchedulerError(f"queues: {bad[0]!r} is not a valid queue name")
            clean["queues"] = ",".join(dict.fromkeys(names))
        elif field == "default_queue":
            if value and not (isinstance(value, str) and QUEUE_RE.match(value)):
                raise SchedulerError(f"default_queue {value!r} is not a valid queue name")
            clean["default_queue"] = value or ""
        else:
            raise SchedulerError(f"{field} is not a field of an owner's policy")
    return clean


def set_owner_policy(owner, *, using: str = "default", **values) -> OwnerPolicy:
    """Create or change ``owner``'s policy (``owner``: a user). ``values``: any of
    POLICY_FIELDS, ``queues`` and ``default_queue`` (see clean_policy); a field not given
    keeps its value (on a new policy: null, that is the settings default). Raises
    SchedulerError naming the bad value; the broker enforces a new ``max_running`` once
    the transaction commits."""
    clean = clean_policy(values)
    with transaction.atomic(using=using):
        policy, _ = OwnerPolicy.objects.using(using).update_or_create(owner=owner,
                                                                     defaults=clean)
        sync_owner_limits(using)
    return policy
