"""Continuations: a run an ack makes ready, leased in that ack's own transaction to the
worker that acked (docs/workflows.md, "Latency"; BENCHMARKS.md, "Workflows (W7)").

A chain's handoff was the ack's transaction, a push to the broker, the worker's lease (a
second transaction) and the child's start. When the ack of a workflow node makes its
downstream run, and the acking worker serves its queue, the engine starts that run's
first attempt in the ack's transaction with the lease's own statement
(transitions.start_attempts: the run ``running`` under the worker, the Attempt row, the
lease expiry LEASE_TTL_S ahead), and the worker hands it to the child the ack has just
freed, without a push or a lease. Everything a lease guarantees holds because it *is* a
lease: the database row is the authority, the worker heartbeats it, a SIGKILLed worker's
lease expires and the reaper retries the run, a stopping worker releases it. The broker
records it as leased after the commit (Broker.adopt), as a lease would have, so its
counters and its own reap stay consistent.

What a continuation may not do is skip a rule the broker's lease applies: a run of a
queue with a concurrency or rate limit, or of an owner with a concurrency limit, is never
continued (it is pushed and leased as any run); nor more runs than the ack finished
(``room``), so a worker never holds more than the children it had. A continued run is
not compared with other ready runs by priority: it takes the child its upstream used.

The offer lives for one ack call in the thread that makes it (the worker's ack lane).
"""

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field

from runs import policy, transitions
from runs.limits import owner_limits
from runs.types import Lease
from scheduler_core import conf

_local = threading.local()


@dataclass
class Offer:
    """A worker's offer to run, at once, runs its ack makes ready.

    ``worker_id`` is the acking worker, ``queues`` the queues it serves, ``room`` the most
    runs it takes (at most the runs the ack finishes), ``ttl_s`` the lease's length in
    seconds. The engine fills ``taken`` with ``(lease, owner id or None)`` of the runs it
    started for the worker, and counts in ``pushed`` the runs it made and left to the
    broker (the worker then leases at once, as before)."""

    worker_id: str
    queues: frozenset[str]
    room: int
    ttl_s: float
    taken: list[tuple[Lease, int | None]] = field(default_factory=list)
    pushed: int = 0
    # The owners with a policy's max_running, read once per ack (continuable).
    limited_owners: frozenset[int] | None = None


@contextmanager
def offering(offer: Offer | None):
    """Make ``offer`` the current thread's offer inside the block (None: no offer)."""
    before = getattr(_local, "offer", None)
    _local.offer = offer
    try:
        yield offer
    finally:
        _local.offer = before


def current() -> Offer | None:
    """This thread's offer, if an ack is making one and has room left."""
    offer = getattr(_local, "offer", None)
    if offer is None or len(offer.taken) >= offer.room:
        return None
    return offer


def mark() -> int:
    """How many runs this thread's offer holds: the savepoint of a listener notes it,
    and ``undo_to`` drops what the listener took if its savepoint rolls back."""
    offer = getattr(_local, "offer", None)
    return len(offer.taken) if offer is not None else 0


def undo_to(count: int) -> None:
    """Forget the runs taken after ``mark()`` returned ``count`` (their rows rolled back)."""
    offer = getattr(_local, "offer", None)
    if offer is not None:
        del offer.taken[count:]


def continuable(queue: str, owner_id: int | None, using: str) -> bool:
    """Whether a run of ``queue`` and owner ``owner_id`` may be continued: the worker
    offering serves the queue and no limit of the broker's lease applies (docs/isolation.md:
    QUEUE_CONCURRENCY, QUEUE_RATE, OWNER_CONCURRENCY and owner policies)."""
    offer = current()
    if offer is None or queue not in offer.queues:
        return False
    if queue in limited_queues():
        return False
    if owner_id is not None:
        if conf.get("OWNER_CONCURRENCY"):
            return False
        if offer.limited_owners is None:
            offer.limited_owners = frozenset(owner_limits(using))
        if owner_id in offer.limited_owners:
            return False
    return True


def limited_queues() -> frozenset[str]:
    """The queues a lease applies a limit to (QUEUE_CONCURRENCY, QUEUE_RATE): their runs
    are never continued."""
    return frozenset(queue for queue, limits in policy.parse_queue_limits(
        conf.get("QUEUE_CONCURRENCY"), conf.get("QUEUE_RATE")).items()
        if limits.max_running or limits.rate)


def take(runs: list[tuple[int, int | None]], using: str) -> set[int]:
    """Start the first attempt of ``runs`` ((run id, owner id), pending, made in the
    current transaction) leased to the current offer's worker, up to its room; call inside
    the ack's transaction. Returns the ids started: the caller must not push them."""
    offer = current()
    if offer is None or not runs:
        return set()
    runs = runs[:offer.room - len(offer.taken)]
    owners = dict(runs)
    leases = transitions.start_attempts([r[0] for r in runs], offer.worker_id, offer.ttl_s,
                                        using)
    offer.taken += [(lease, owners[lease.run_id]) for lease in leases]
    return {lease.run_id for lease in leases}
