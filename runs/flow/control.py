"""Flow control by handler and by key: the rate limits in force (RateLimit, read with a
short cache) and each run's gates, what a lease checks it against (docs/isolation.md,
"Rate limits" and "Concurrency keys").

A job's ``rate_key`` and ``concurrency_key`` are stored ``"<template>=<value>"``
(jobs/flow_keys.py). A run's gate entry, which the Redis broker keeps per run
(runs/brokers/redis/lua/lease.lua), is ``handler \\t rate_key \\t concurrency_key \\t limit``.
"""

import re
import threading
import time

from django.db.models import Q

from jobs.models import Job
from runs.flow.models import RateLimit

TEMPLATE_RE = re.compile(r"^(handler|name|payload(\.[A-Za-z0-9_-]{1,64}){1,8})$")
TEMPLATE_HINT = "a template: handler, name or payload.<field>[.<field>...]"
CACHE_S = 1.0  # how long the limits read from the database serve (a change takes effect
# within this on the database broker; the Redis broker is told at once)
_cache: dict[str, tuple[float, dict]] = {}
_in_use: dict[str, float | bool] = {}
_lock = threading.Lock()
FLOW_KEYED = ~Q(rate_key="") | ~Q(concurrency_key="")
_marked = False


def rate_limits(using: str = "default") -> dict[tuple[str, str], tuple[float, float]]:
    """(scope, name) -> (rate per second, burst in runs) of every RateLimit, read at most
    once per CACHE_S seconds per process."""
    now = time.monotonic()
    cached = _cache.get(using)
    if cached is not None and now - cached[0] < CACHE_S:
        return cached[1]
    table = {(scope, name): (rate, burst) for scope, name, rate, burst in
             RateLimit.objects.using(using).values_list("scope", "name", "rate", "burst")}
    with _lock:
        _cache[using] = (now, table)
    return table


def forget_cache(using: str = "default") -> None:
    """Drop this process's cached limits, so the next read sees a change at once."""
    _cache.pop(using, None)
    if _in_use.get(using) is not True:
        _in_use.pop(using, None)


def in_use(using: str = "default") -> bool:
    """Whether any rate limit exists or any job has a rate or concurrency key: until then
    brokers skip every per-run check. Once true it stays true for the process; while false
    it is read again at most once per CACHE_S seconds."""
    state = _in_use.get(using)
    if state is True or _marked:
        return True
    now = time.monotonic()
    if state is not None and now - state < CACHE_S:
        return False
    # The condition is the partial index job_flow_keyed's, word for word, so this reads
    # that index (usually empty) and not the jobs table.
    used = (RateLimit.objects.using(using).exists()
            or Job.objects.using(using).filter(FLOW_KEYED).exists())
    _in_use[using] = True if used else now
    return used


def forget_use() -> None:
    """Forget that flow control was in use (a test's database emptied): the next
    ``in_use`` reads the database again."""
    global _marked
    _marked = False
    _in_use.clear()


def mark_in_use() -> None:
    """Record that flow control is in use now, on every database alias (a keyed job or
    a limit was just made in this process)."""
    global _marked
    _marked = True


def template_of(key: str) -> str:
    """The template of a stored key ``"<template>=<value>"``, or of an owner's scoped key
    ``"<owner>:<template>=<value>"`` (``scoped``; a template holds no colon)."""
    return key.partition("=")[0].rpartition(":")[2]


def scoped(owner_id: int | None, key: str) -> str:
    """Stored key ``key`` as one owner's: ``"<owner id, 0 for none>:<key>"``. Keys are
    counted and bucketed per owner, so one tenant's runs under another's key value
    neither hold its slots nor draw its tokens (docs/isolation.md, "Concurrency keys");
    "" stays "" (no key)."""
    return f"{owner_id or 0}:{key}" if key else ""


def gate(handler: str, rate_key: str, concurrency_key: str, limit: int,
         owner_id: int | None) -> str:
    """The gate entry of a run of a job of ``owner_id`` with these fields (module
    docstring), its keys scoped to the owner."""
    return (f"{handler}\t{scoped(owner_id, rate_key)}\t{scoped(owner_id, concurrency_key)}"
            f"\t{limit if concurrency_key else 0}")


def gates_of(refs: list, using: str = "default") -> dict[int, str]:
    """Run id -> its gate entry, for the runs of ``refs`` (runs/types.RunRef): the
    entry a ref carries, else read (one query) while flow control is in use (``in_use``)."""
    gates = {ref.id: ref.gate for ref in refs if ref.gate is not None}
    run_ids = [ref.id for ref in refs if ref.gate is None]
    if not run_ids or not in_use(using):
        return gates
    from runs.models import Run

    rows = (Run.objects.using(using).filter(pk__in=run_ids)
            .values_list("pk", "job__handler", "job__rate_key", "job__concurrency_key",
                         "job__concurrency_limit", "job__owner_id"))
    gates.update((pk, gate(handler, rate_key, ckey, limit, owner))
                 for pk, handler, rate_key, ckey, limit, owner in rows)
    return gates


def redis_fields(using: str = "default") -> dict[str, str]:
    """The limits hash fields the Redis lease reads: ``rh:<handler>`` and
    ``rk:<template>`` -> ``"<rate> <burst>"``."""
    prefix = {RateLimit.Scope.HANDLER: "rh:", RateLimit.Scope.KEY: "rk:"}
    return {f"{prefix[scope]}{name}": f"{rate!r} {burst!r}"
            for (scope, name), (rate, burst) in rate_limits(using).items()}


def buckets_of(handler: str, rate_key: str,
               limits: dict[tuple[str, str], tuple[float, float]]
               ) -> list[tuple[str, float, float]]:
    """The buckets a run of ``handler`` with ``rate_key`` (stored and ``scoped`` to its
    owner) draws a token from: (bucket name, rate, burst) for its handler's limit and
    its key template's."""
    found = []
    if (RateLimit.Scope.HANDLER, handler) in limits:
        found.append((f"h:{handler}", *limits[(RateLimit.Scope.HANDLER, handler)]))
    if rate_key and (RateLimit.Scope.KEY, template_of(rate_key)) in limits:
        found.append((f"k:{rate_key}", *limits[(RateLimit.Scope.KEY, template_of(rate_key))]))
    return found
