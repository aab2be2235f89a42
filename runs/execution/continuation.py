"""Continuations: a run an ack makes ready, leased in that ack's own transaction to the
worker that acked (docs/workflows.md, "Latency"; BENCHMARKS.md, "Workflows (W7)").

A chain's handoff was the ack's transaction, a push to the broker, the worker's lease (a
second transaction) and the child's start. When the ack of a workflow node makes its
downstream run, and the acking worker serves its queue, the engine starts that run's
first attempt in the ack's transaction with the lease's own statement
(runs/execution/leases.py, start_attempts: the run ``running`` under the worker, the
Attempt row, the lease expiry LEASE_TTL_S ahead), and the worker hands it to the child
the ack has just freed, without a push or a lease. Everything a lease guarantees holds
because it *is* a lease: the database row is the authority, the worker heartbeats it, a
SIGKILLed worker's lease expires and the reaper retries the run, a stopping worker
releases it. The broker records it as leased after the commit (Broker.adopt), as a lease
would have, so its counters and its own reap stay consistent.

What a continuation may not do is skip a rule the broker's lease applies: a run of a
queue with a concurrency or rate limit, or of an owner with a concurrency limit, is never
continued (it is pushed and leased as any run); nor more runs than the ack finished
(``room``), so a worker never holds more than the children it had; nor a run while a
more urgent one (a lower priority number) waits ready in its queue or is left to the
broker by the same ack (``choose`` takes the ack's runs in the lease's order), so a long
chain cannot keep a child from the runs its lease would have taken first
(docs/workflows.md, "Latency"). What waits is read from the broker once per ack
(``Broker.most_urgent_ready``, a snapshot: a run pushed a moment later is not seen, as it
would not be by a lease made a moment earlier); if the broker cannot tell, nothing is
continued and the ack stands.

The offer lives for one ack call in the thread that makes it (the worker's ack lane).
"""

import logging
import threading
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field

from runs.execution.leases import start_attempts
from runs.flow import control as flow
from runs.tenancy import policy
from runs.tenancy.limits import owner_limits
from runs.types import Lease
from scheduler_core import conf

log = logging.getLogger("scheduler.worker")
_local = threading.local()


@dataclass
class Offer:
    """A worker's offer to run, at once, runs its ack makes ready.

    ``worker_id`` is the acking worker, ``queues`` the queues it serves, ``room`` the most
    runs it takes (at most the runs the ack finishes), ``ttl_s`` the lease's length in
    seconds, ``ready_head`` a callable taking the queues (a sorted list of str) and
    returning {queue: the most urgent priority (0-9) waiting ready in it}
    (``Broker.most_urgent_ready``; the broker's ``complete`` sets its own when None). The
    engine fills ``taken`` with ``(lease, owner id or None)`` of the runs it
    started for the worker, and counts in ``pushed`` the runs it made and left to the
    broker (the worker then leases at once, as before)."""

    worker_id: str
    queues: frozenset[str]
    room: int
    ttl_s: float
    taken: list[tuple[Lease, int | None]] = field(default_factory=list)
    pushed: int = 0
    ready_head: Callable[[list[str]], dict[str, int]] | None = None
    # The owners with a policy's max_running, read once per ack (continuable).
    limited_owners: frozenset[int] | None = None
    # The queues' most urgent waiting priority, read once per ack (urgent).
    waiting: dict[str, int] | None = None


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


def continuable(queue: str, owner_id: int | None, priority: int, using: str) -> bool:
    """Whether a run of ``queue``, owner ``owner_id`` and ``priority`` (0-9, 0 the most
    urgent) may be continued: the worker offering serves the queue, no limit of the broker's
    lease applies (docs/isolation.md: QUEUE_CONCURRENCY, QUEUE_RATE, OWNER_CONCURRENCY,
    owner policies; no run at all while flow control by handler or key is in use,
    runs/flow/control.py) and no more urgent run waits ready in the queue (``urgent``)."""
    offer = current()
    if offer is None or queue not in offer.queues:
        return False
    if queue in limited_queues() or flow.in_use(using):
        return False
    waiting = urgent(offer).get(queue)
    if waiting is not None and waiting < priority:
        return False
    if owner_id is not None:
        if conf.get("OWNER_CONCURRENCY"):
            return False
        if offer.limited_owners is None:
            offer.limited_owners = frozenset(owner_limits(using))
        if owner_id in offer.limited_owners:
            return False
    return True


def urgent(offer: Offer) -> dict[str, int]:
    """{queue: the most urgent priority waiting ready in it} for ``offer``'s queues, read
    once per offer from its ``ready_head`` (no ``ready_head``: nothing waits). When the
    broker cannot be read (its errors, whatever they are), every queue counts as holding
    a run of priority -1, more urgent than any: nothing is continued, the runs are pushed
    and leased in order, and the ack itself stands."""
    if offer.waiting is None:
        if offer.ready_head is None:
            offer.waiting = {}
        else:
            try:
                offer.waiting = dict(offer.ready_head(sorted(offer.queues)))
            except Exception as exc:  # noqa: BLE001 - any failure: continue nothing
                log.warning("continuation: the broker's ready runs could not be read "
                            "(%s: %s); this ack continues nothing", type(exc).__name__, exc)
                offer.waiting = dict.fromkeys(offer.queues, -1)
    return offer.waiting


def limited_queues() -> frozenset[str]:
    """The queues a lease applies a limit to (QUEUE_CONCURRENCY, QUEUE_RATE): their runs
    are never continued."""
    return frozenset(queue for queue, limits in policy.parse_queue_limits(
        conf.get("QUEUE_CONCURRENCY"), conf.get("QUEUE_RATE")).items()
        if limits.max_running or limits.rate)


def choose(refs: list, now, using: str) -> list[tuple[int, int | None]]:
    """Of ``refs`` (runs/types.RunRef) an ack has just made ready, those to continue, as
    (run id, owner id or None), in the lease's order (priority, run_at, id; Redis scores
    and the run_ready index alike) and up to the offer's room: each due at ``now`` (an
    aware UTC datetime), ``continuable``, and not behind a more urgent run of its queue
    that this ack leaves to the broker (one it may not continue, an owner's limit say).
    Empty without an offer."""
    offer = current()
    if offer is None:
        return []
    room = offer.room - len(offer.taken)
    left: dict[str, int] = {}  # queue -> most urgent priority this ack leaves waiting
    picked: list[tuple[int, int | None]] = []
    for ref in sorted(refs, key=lambda r: (r.priority, r.run_at, r.id)):
        if ref.run_at > now:
            continue  # not ready: it waits for no one and no one waits for it
        behind = left.get(ref.queue)
        if (len(picked) < room and (behind is None or behind >= ref.priority)
                and continuable(ref.queue, ref.owner, ref.priority, using)):
            picked.append((ref.id, ref.owner))
        else:
            left[ref.queue] = ref.priority if behind is None else min(behind, ref.priority)
    return picked


def take(runs: list[tuple[int, int | None]], using: str) -> set[int]:
    """Start the first attempt of ``runs`` ((run id, owner id), pending, made in the
    current transaction) leased to the current offer's worker, up to its room; call inside
    the ack's transaction. Returns the ids started: the caller must not push them."""
    offer = current()
    if offer is None or not runs:
        return set()
    runs = runs[:offer.room - len(offer.taken)]
    owners = dict(runs)
    leases = start_attempts([r[0] for r in runs], offer.worker_id, offer.ttl_s,
                                        using)
    offer.taken += [(lease, owners[lease.run_id]) for lease in leases]
    return {lease.run_id for lease in leases}
