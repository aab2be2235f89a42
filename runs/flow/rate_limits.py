"""Set and remove rate limits by handler or by key at run time: the one path the REST API
(jobs/api/rate_limits.py), the admin (runs/admin/rate_limits.py) and Python callers take
(docs/isolation.md, "Rate limits"). A change reaches the Redis broker at once (its limits
hash) and the database broker within flow.CACHE_S."""

import math

from django.db import transaction

from runs.brokers import get_broker
from runs.flow import control as flow
from runs.flow.models import RateLimit
from runs.models import PENDING_STATES, Run
from runs.tenancy.limits import owner_limits
from scheduler_core.exceptions import InvalidJob
from scheduler_core.registry import handler_names

NAME_RE_HINT = "a handler name, or a rate_key template such as payload.customer_id"
MAX_RATE = 1_000_000.0  # runs per second: beyond it a rate is surely a unit mistake
MIN_RATE = 0.0001  # one run in under 3 hours: below it, deferred runs would wait for ever
REGATE_CAP = 100_000  # most waiting runs pushed again so a new limit reaches them


def problems(scope, name, rate, burst) -> dict[str, str]:
    """field -> reason for each bad value of a rate limit (empty when all are good)."""
    errors = {}
    if scope not in RateLimit.Scope.values:
        errors["scope"] = f"must be one of {', '.join(RateLimit.Scope.values)}"
    if not isinstance(name, str) or not name.strip() or len(name) > 200 \
            or any(ord(c) < 32 for c in name):
        errors["name"] = f"must be {NAME_RE_HINT}, at most 200 characters"
    elif scope == RateLimit.Scope.KEY and not flow.TEMPLATE_RE.match(name):
        errors["name"] = f"must be {flow.TEMPLATE_HINT}"
    elif scope == RateLimit.Scope.HANDLER and name not in handler_names():
        errors["name"] = f"no handler {name!r} is registered (a limit on a name no job " \
                         "can have would limit nothing)"
    if isinstance(rate, bool) or not isinstance(rate, int | float) \
            or not math.isfinite(rate) or not MIN_RATE <= rate <= MAX_RATE:
        errors["rate"] = f"must be a number of runs per second from {MIN_RATE:g} to " \
                         f"{MAX_RATE:g}"
    if burst is not None and (isinstance(burst, bool) or not isinstance(burst, int | float)
                              or not math.isfinite(burst) or not 1 <= burst <= MAX_RATE):
        errors["burst"] = f"must be a number of runs from 1 to {MAX_RATE:g}"
    return errors


def set_rate_limit(scope: str, name: str, rate: float, burst: float | None = None,
                   using: str = "default") -> RateLimit:
    """Limit the runs of handler ``name`` (scope ``"handler"``) or of rate_key template
    ``name`` (scope ``"key"``, one bucket per value) to ``rate`` starts per second, with a
    bucket of ``burst`` runs (default: one second's worth, at least 1). Replaces any limit
    of that scope and name. Raises InvalidJob naming each bad field."""
    errors = problems(scope, name, rate, burst)
    if errors:
        raise InvalidJob(errors)
    burst = float(burst) if burst is not None else max(float(rate), 1.0)
    with transaction.atomic(using=using):
        limit, _ = RateLimit.objects.using(using).update_or_create(
            scope=scope, name=name, defaults={"rate": float(rate), "burst": burst})
        transaction.on_commit(lambda: _spread(scope, name, using), using=using)
    return limit


def delete_rate_limit(scope: str, name: str, using: str = "default") -> bool:
    """Remove the limit of ``scope`` and ``name``; returns whether there was one."""
    deleted, _ = RateLimit.objects.using(using).filter(scope=scope, name=name).delete()
    if deleted:
        _spread(scope, name, using)
    return bool(deleted)


def _spread(scope: str, name: str, using: str) -> None:
    """Tell this process and the broker of a changed limit. On a broker that keeps its
    own copy of the runs (Redis), the waiting runs it concerns are pushed again: runs
    pushed before flow control was in use get their gate, and runs the old limit
    deferred are due again at once, for the new one to decide."""
    flow.mark_in_use()
    flow.forget_cache(using)
    broker = get_broker(using)
    broker._after_commit(broker.sync_limits, owner_limits(using))
    if broker.ready_when_stored:
        return
    runs = Run.objects.using(using).filter(state__in=PENDING_STATES)
    runs = (runs.filter(job__handler=name) if scope == RateLimit.Scope.HANDLER
            else runs.filter(job__rate_key__startswith=f"{name}="))
    ids = list(runs.values_list("pk", flat=True)[:REGATE_CAP])
    broker._after_commit(broker._push_ids, ids, True)


def rate_limit_rows(using: str = "default") -> list[dict]:
    """Every rate limit as ``{"scope", "name", "rate", "burst", "updated_at"}``, by
    scope then name."""
    return list(RateLimit.objects.using(using).order_by("scope", "name")
                .values("scope", "name", "rate", "burst", "updated_at"))
