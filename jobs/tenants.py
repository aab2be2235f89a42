"""Per-owner bounds (docs/isolation.md, "Tenant bounds"): what one owner's jobs may ask for
(queue, priority, timeout_s, max_attempts) and how much the owner may hold (jobs, pending
runs). The Python API applies them whenever it is given an owner (jobs/services.py), and
so do the REST API and the admin, which call it. The concurrency bound, ``max_running``,
is enforced by the brokers at lease time (runs/tenancy/limits.py syncs it to them).

Each bound is the owner's OwnerPolicy value, or the settings default when that is null;
jobs without an owner have none. Cheap on the hot path: one read of the policy per
request, and for a request that adds jobs or runs two counts that stop at the quota
(COUNT over at most quota + 1 rows), whatever the number of jobs in the request.
The Bounds and the quota checks themselves are runs/tenancy/quotas.py's (the engine's requeue
keeps to ``max_pending`` too), imported here so callers find them where they always did.
"""

from django.db import transaction

from jobs.models import QUEUE_RE, OwnerPolicy
from runs.services import sync_owner_limits
from runs.tenancy.quotas import (  # noqa: F401 - the tenant rules' API, kept where callers import it
    MAX_INT,
    POLICY_FIELDS,
    QUOTA_LOCK,
    SHARED_QUEUE,
    Bounds,
    QuotaExceeded,
    bounds_from,
    bounds_of,
    check_quotas,
    fit_pending,
    pending_load,
)
from scheduler_core import conf
from scheduler_core.exceptions import SchedulerError


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


DEFAULT_PRIORITY = 5


def defaults_within(bounds: Bounds | None) -> dict[str, int]:
    """The ``priority``, ``timeout_s`` and ``max_attempts`` a job that names none gets: the
    settings defaults (5, DEFAULT_TIMEOUT_S, DEFAULT_MAX_ATTEMPTS), each kept within the
    owner's ``bounds`` (None: no owner, none apply). A client that asks for nothing is
    never refused for a default, and never given more than its owner may ask for: with
    max_timeout_s 60 a job without a timeout gets min(300, 60) s."""
    values = {"priority": DEFAULT_PRIORITY, "timeout_s": conf.get("DEFAULT_TIMEOUT_S"),
              "max_attempts": conf.get("DEFAULT_MAX_ATTEMPTS")}
    if bounds is not None:
        values["priority"] = max(values["priority"], bounds.highest_priority)
        if bounds.max_timeout_s:
            values["timeout_s"] = min(values["timeout_s"], bounds.max_timeout_s)
        if bounds.max_attempts:
            values["max_attempts"] = min(values["max_attempts"], bounds.max_attempts)
    return values


def with_defaults(spec: dict, defaults: dict[str, int]) -> dict:
    """``spec`` with each key of ``defaults`` (defaults_within's) it leaves out or sets to
    None filled in; ``spec`` itself when it names them all (no copy on the bulk path)."""
    missing = [key for key in defaults if spec.get(key) is None]
    if not missing:
        return spec
    return {**spec, **{key: defaults[key] for key in missing}}


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
