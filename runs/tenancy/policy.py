"""Isolation policy read from settings: priority classes and their weights, per-queue
concurrency limits and rate limits, and the worker's queue weights (docs/isolation.md;
docs/scaling.md).

Both brokers apply the same policy: a lease call picks among the priority classes that
have ready runs by stride scheduling (Waldspurger & Weihl, "Stride Scheduling", MIT
TR-528, 1995), so each backlogged class gets its weight's share of leases and an empty
class's share goes to the others; within a class the order stays strict (priority, then
run_at). Values are parsed once per distinct setting string.
"""

import functools
import math
from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured

from jobs.models import QUEUE_RE
from scheduler_core import conf

PRIORITY_SPAN = 1 << 42
"""Ready score of a run: ``priority * PRIORITY_SPAN + run_at_ms`` (runs/brokers/redis/lua)."""


@dataclass(frozen=True)
class PriorityClass:
    """Priorities ``lo``..``hi`` (inclusive, 0-9) sharing ``weight`` (a positive int)."""

    lo: int
    hi: int
    weight: int

    @property
    def stride(self) -> float:
        """Virtual time one lease costs this class: 1 / weight (stride scheduling)."""
        return 1.0 / self.weight


@dataclass(frozen=True)
class QueueLimits:
    """``max_running``: most runs of the queue leased at once (0: no limit);
    ``rate``: runs started per second (0: no limit), ``burst``: bucket size in runs."""

    max_running: int = 0
    rate: float = 0.0
    burst: float = 0.0

    def shard_share(self, shard: int, shards: int) -> "QueueLimits":
        """Shard ``shard``'s share of these limits when the queue's ``shards`` (>= 1)
        shards each keep their own (a spread queue, docs/isolation.md, "One queue over
        several masters"): ``max_running`` split so the shares sum to it, the first
        ``max_running % shards`` shards one more, but at least 1 each; ``rate`` and
        ``burst`` divided by ``shards``, the burst at least 1. A shard numbered beyond
        ``shards`` (left by a larger SHARDS) takes the share of its number modulo
        ``shards``."""
        index = shard % shards
        running = 0
        if self.max_running:
            base, extra = divmod(self.max_running, shards)
            running = max(base + (index < extra), 1)
        burst = max(self.burst / shards, 1.0) if self.rate else self.burst
        return QueueLimits(running, self.rate / shards, burst)


@functools.cache
def parse_classes(spec: str) -> tuple[PriorityClass, ...]:
    """Parse PRIORITY_CLASSES, e.g. ``"0-2:70,3-6:25,7-9:5"``.

    The ranges must cover 0..9 in order without gaps or overlaps; weights are positive
    integers. An empty spec is one class 0-9 (strict priority). Raises
    ImproperlyConfigured naming the bad part.
    """
    if not spec.strip():
        return (PriorityClass(0, 9, 1),)
    classes, expected = [], 0
    for part in spec.split(","):
        try:
            if not part.isascii():
                raise ValueError(part)
            span, weight = part.strip().split(":")
            lo, _, hi = span.partition("-")
            cls = PriorityClass(int(lo), int(hi or lo), int(weight))
        except ValueError as exc:
            raise ImproperlyConfigured(
                f"PRIORITY_CLASSES: {part.strip()!r} is not <lo>-<hi>:<weight>") from exc
        if cls.lo != expected or cls.hi < cls.lo or cls.hi > 9 or cls.weight < 1:
            raise ImproperlyConfigured(
                f"PRIORITY_CLASSES: {part.strip()!r} must start at priority {expected}, "
                "end at or before 9, and have a weight of at least 1")
        classes.append(cls)
        expected = cls.hi + 1
    if expected != 10:
        raise ImproperlyConfigured("PRIORITY_CLASSES must cover priorities 0 to 9")
    return tuple(classes)


def _pairs(name: str, spec: str) -> dict[str, str]:
    pairs = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        queue, sep, value = part.partition("=")
        if not sep or not QUEUE_RE.match(queue.strip()):
            raise ImproperlyConfigured(f"{name}: {part!r} is not <queue>=<value>")
        pairs[queue.strip()] = value.strip()
    return pairs


@functools.cache
def parse_queue_limits(concurrency: str, rate: str) -> dict[str, QueueLimits]:
    """Parse QUEUE_CONCURRENCY (``"reports=4"``) and QUEUE_RATE (``"emails=50"`` or
    ``"emails=50:200"``: rate per second and burst; burst defaults to one second of rate,
    at least 1). Raises ImproperlyConfigured naming the bad part."""
    limits: dict[str, dict] = {}
    for queue, value in _pairs("QUEUE_CONCURRENCY", concurrency).items():
        if not (value.isascii() and value.isdigit()) or int(value) < 1:
            raise ImproperlyConfigured(
                f"QUEUE_CONCURRENCY: {queue}={value!r} must be a positive integer")
        limits.setdefault(queue, {})["max_running"] = int(value)
    for queue, value in _pairs("QUEUE_RATE", rate).items():
        rate_s, _, burst_s = value.partition(":")
        try:
            per_s = float(rate_s)
            burst = float(burst_s) if burst_s else max(per_s, 1.0)
        except ValueError as exc:
            raise ImproperlyConfigured(
                f"QUEUE_RATE: {queue}={value!r} is not <rate>[:<burst>]") from exc
        if not (math.isfinite(per_s) and math.isfinite(burst)) or per_s <= 0 or burst < 1:
            raise ImproperlyConfigured(
                f"QUEUE_RATE: {queue}={value!r}: rate must be a finite number > 0 and "
                "burst a finite number >= 1")
        limits.setdefault(queue, {}).update(rate=per_s, burst=burst)
    return {queue: QueueLimits(**values) for queue, values in limits.items()}


def check() -> None:
    """Parse every isolation setting now (daemons call this before they start), so a bad
    value stops the daemon at once with ImproperlyConfigured naming it."""
    classes()
    parse_queue_limits(conf.get("QUEUE_CONCURRENCY"), conf.get("QUEUE_RATE"))
    spread_queues()
    for name, low in (("OWNER_CONCURRENCY", 0), ("FAIR_SCAN", 0), ("SHARDS", 1)):
        if conf.get(name) < low:
            raise ImproperlyConfigured(f"SCHEDULER {name} must be at least {low}")


def classes() -> tuple[PriorityClass, ...]:
    """The configured priority classes (PRIORITY_CLASSES)."""
    return parse_classes(conf.get("PRIORITY_CLASSES"))


def spread_queues() -> frozenset[str] | None:
    """The queues SPREAD_QUEUES names (docs/isolation.md, "One queue over several
    masters"): a frozenset of names, empty for none, None for every queue (``"*"``).
    Raises ImproperlyConfigured naming a part that is not a queue name."""
    return parse_spread(conf.get("SPREAD_QUEUES"))


@functools.cache
def parse_spread(spec: str) -> frozenset[str] | None:
    """Parse SPREAD_QUEUES: ``"reports,emails"``, ``"*"`` (None: every queue) or empty.
    Raises ImproperlyConfigured naming the bad part."""
    names = [part.strip() for part in spec.split(",") if part.strip()]
    if names == ["*"]:
        return None
    for name in names:
        if not QUEUE_RE.match(name):
            raise ImproperlyConfigured(
                f"SPREAD_QUEUES: {name!r} is not a queue name (or give \"*\" alone)")
    return frozenset(names)


def queue_limits(queue: str) -> QueueLimits:
    """The configured limits of ``queue`` (QUEUE_CONCURRENCY, QUEUE_RATE)."""
    table = parse_queue_limits(conf.get("QUEUE_CONCURRENCY"), conf.get("QUEUE_RATE"))
    return table.get(queue, QueueLimits())


def parse_queue_weights(spec: str) -> dict[str, int]:
    """Parse a worker's ``--queues``: ``"default,reports"`` (weight 1 each) or
    ``"default:3,reports:1"``. Returns queue -> weight in the order given. Raises
    ValueError naming the bad part."""
    weights: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        queue, sep, weight = part.partition(":")
        if not QUEUE_RE.match(queue):
            raise ValueError(f"invalid queue name {queue!r}")
        if sep and (not (weight.isascii() and weight.isdigit()) or int(weight) < 1):
            raise ValueError(f"{part!r}: the weight must be a positive integer")
        if queue in weights:
            raise ValueError(f"queue {queue!r} is named twice")
        weights[queue] = int(weight) if sep else 1
    if not weights:
        raise ValueError("no queue given")
    return weights


class Stride:
    """Stride-scheduling state of ``classes``: each class's ``passes`` (virtual time) and
    ``vt``, the virtual time of the last lease. Both brokers use it: the database broker
    per worker process, the Redis broker for queues with several shards (state in Redis);
    lease.lua implements the same rule inside Redis."""

    def __init__(self, classes: tuple[PriorityClass, ...], passes: list[float] | None = None,
                 vt: float = 0.0):
        self.classes = classes
        self.passes = list(passes) if passes is not None else [c.stride for c in classes]
        self.vt = vt

    def settle(self, has_ready: list[bool]) -> None:
        """A class with nothing ready cannot bank credit: its pass is raised to ``vt``, so
        when runs arrive it is served next but not more than its share."""
        self.passes = [p if ready else max(p, self.vt)
                       for p, ready in zip(self.passes, has_ready, strict=True)]

    def choose(self, open_: list[int]) -> int | None:
        """The class to serve next among ``open_`` (lowest pass, then lowest index)."""
        return min(open_, key=lambda i: (self.passes[i], i)) if open_ else None

    def charge(self, i: int) -> None:
        """Record one lease to class ``i``."""
        self.vt = self.passes[i]
        self.passes[i] += self.classes[i].stride


def swrr_plan(queues: list[str], n: int, weights: dict[str, int],
              current: dict[str, int]) -> dict[str, int]:
    """How many of ``n`` slots each of ``queues`` gets by smooth weighted round-robin (as
    nginx's upstream balancer; ``weights``: queue -> positive int, 1 if absent), updating
    ``current`` (queue -> its running credit, kept by the caller between calls) so that
    over many calls each queue gets its weight's share."""
    total = sum(weights.get(q, 1) for q in queues)
    wanted = dict.fromkeys(queues, 0)
    for _ in range(n):
        for queue in queues:
            current[queue] += weights.get(queue, 1)
        best = max(queues, key=lambda q: current[q])
        current[best] -= total
        wanted[best] += 1
    return wanted


def stride_plan(classes_: tuple[PriorityClass, ...], passes: list[float], vt: float,
                available: list[int], n: int) -> tuple[list[int], list[float], float]:
    """Split ``n`` leases among ``classes_`` by stride scheduling (``Stride``), given how
    many ready runs each class has (``available``), its ``passes`` and ``vt``. Returns
    ``(takes per class, new passes, new vt)``."""
    stride = Stride(classes_, passes, vt)
    left = list(available)
    stride.settle([a > 0 for a in left])
    takes = [0] * len(classes_)
    while sum(takes) < n:
        i = stride.choose([c for c, a in enumerate(left) if a > 0])
        if i is None:
            break
        stride.charge(i)
        takes[i] += 1
        left[i] -= 1
    stride.settle([a > 0 for a in left])
    return takes, stride.passes, stride.vt
