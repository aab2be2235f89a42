"""Acks in the child: the child process that ran a workflow node's run acks its success
itself and starts, at once, the downstream run that ack continued on its worker
(docs/workflows.md, "Latency"; BENCHMARKS.md, "Workflows (W7)").

Why: acked by the worker, a chain's hop went child -> worker's main loop -> ack lane ->
database -> ack lane -> main loop -> child, four handoffs between threads and processes
around the database call (0.84 of a 2.44 ms hop, the lane's answer waiting for the GIL
behind the same ack's Redis bookkeeping). Acked by the child, the hop is the handler, the
database call and the next handler, in one process; the worker hears of it after the
fact and does the broker's bookkeeping (Books) in its ack lane, off the hop.

When: a run known to be a workflow node's (the task's ``watched``), that succeeded with
no log lines, on PostgreSQL (the one-call ack, workflows/execution/ack_pg.py), when the child has
nothing else handed to it and its worker allows it. The worker allows it
(``control[ALLOWED]``) while it holds no run leased ahead, is not stopping and has no
``max_runs``; a child may take it only if no task was handed to it after the one it ran
(``control[LAST_SEQ]``, the last task number given out, by either side, under the lock).
So a continued run never jumps a run its worker leased first, as an ack in the worker
would not (runs/worker/acks.py, offer), and a continuation's number comes after every
task handed before it and before every task handed after.

What the worker keeps: the child sends ``("acking", <the done fields>)`` before the ack.
The worker holds that outcome (InFlight.pending) and acks it itself, fenced as any ack,
if the child dies or is cut off during the ack, if the ack fails (``("ack_back",
run_id)``) or is refused; a run the lost ack had continued is then left to its lease's
expiry, as a dead worker's (the reaper retries it). On ``("acked", ...)`` the worker
counts and reports the outcome, keeps the books and, when a run was continued, records it
as the child's run executing, its deadline armed from the instant the child started it.

Those two messages go through the child's quiet pipe (wire.quiet_sender), which the
worker reads before the main pipe, and at least every 50 ms while it may be written to,
but never waits on: a write to the main pipe woke the worker, which took the child's core
for about 150 µs, twice a hop (BENCHMARKS.md, "Workflows (W7)"). Each carries how many
main-pipe messages went before it, and the worker handles it after those (wire.in_order):
a ``done`` sent before an ``acking`` but read after it had left the ``acking`` unheard
and the ``acked`` without its outcome.

The wire (runs/worker/wire.py): times in integer microseconds or the child's
time.monotonic(), leases as plain tuples (``lease_wire``), the books as
``books_wire``: pickling datetimes costs 15-20 µs each, paid on the hop.
"""

import time
from dataclasses import dataclass

from django.db import connections

from runs import tracing
from runs.clock import from_us, to_us
from runs.execution import continuation
from runs.models import AttemptOutcome
from runs.types import Books, Lease, Outcome
from runs.worker import wire

# Indices in the child's shared ``control`` array (runs/worker/wire.py; 0-2 are the
# task started, the task up to which to skip, the task to stop).
ALLOWED = 3  # 1: the worker allows acks in the child now
LAST_SEQ = 4  # the last task number given out, by the worker (hand) or the child (claim)
# Runs the child may still start, handed or continued (-1: no limit): its runs per child
# (runs/worker/recycle.py) less those given it, each taken under the lock by the one
# giving it, the worker (pool.Slot.next_seq) or the child (claim).
BUDGET = 5
CONTROL_SIZE = 6


@dataclass(frozen=True)
class Handoff:
    """What a child needs to ack and continue: its worker's id, the queues it serves,
    the lease length (seconds), the database alias and the broker's name. Given to each
    child as it is made (HANDOFF in the child); None: no acks in the child."""

    worker_id: str
    queues: tuple[str, ...]
    ttl_s: float
    using: str
    broker: str


HANDOFF: list[Handoff | None] = [None]


def usable(using: str) -> bool:
    """Whether children of a worker on database ``using`` may ack: PostgreSQL only (the
    one-call ack the hop is built on)."""
    return connections[using].vendor == "postgresql"


def claim(task: dict, control, lock) -> int:
    """The number the continuation of ``task``'s ack would run under, or 0 when this
    child may not ack ``task`` itself (not a workflow node's, not allowed, a task was
    handed to it after this one, or it may start no more runs: BUDGET). Taken under the
    control lock; a number taken and not used is a gap, which nothing minds (a run of the
    budget taken and not used is one the child does not run before it is replaced)."""
    if HANDOFF[0] is None or not task.get("watched"):
        return 0
    with lock:
        if (not control[ALLOWED] or control[LAST_SEQ] != task["seq"]
                or control[2] == task["seq"] or control[BUDGET] == 0):
            return 0
        if control[BUDGET] > 0:
            control[BUDGET] -= 1
        control[LAST_SEQ] += 1
        return control[LAST_SEQ]


def lease_wire(lease: Lease) -> tuple:
    """A lease as the pipe carries it: (run id, attempt, queue, shard, expiry in µs,
    task dict or None)."""
    return (lease.run_id, lease.attempt, lease.queue, lease.shard, to_us(lease.expires_at),
            lease.task)


def lease_of(wire: tuple) -> Lease:
    """The Lease of ``lease_wire``'s tuple."""
    run_id, attempt, queue, shard, expires_us, task = wire
    return Lease(run_id, attempt, queue, shard, from_us(expires_us), task=task)


def books_wire(books: Books) -> tuple:
    """Books as the pipe carries them (books_of is the inverse)."""
    return (books.finished, [(lease_wire(lease), owner) for lease, owner in books.taken],
            books.ttl_s, books.retried)


def books_of(wire: tuple) -> Books:
    finished, taken, ttl_s, retried = wire
    return Books(finished, [(lease_of(lease), owner) for lease, owner in taken], ttl_s,
                 retried)


def ack_here(task: dict, done: tuple, seq: int, control, lock, send, quiet) -> dict | None:
    """Ack ``done`` (the child's ``("done", ...)`` message for ``task``, a success without
    log lines) in this child, continuing at most one run under number ``seq`` (claim's);
    returns the continued run's task, to execute next, or None. Tells the worker through
    ``quiet`` (``acking``, ``acked``: the quiet pipe, wire.quiet_sender) and ``send``
    (``ack_back``: the worker must act); raises nothing an ack raises (the worker then
    acks)."""
    config = HANDOFF[0]
    _, run_id, attempt, ok, result, error, logs, began, finished, retry = done
    went = quiet(("acking", *done[1:]))
    if not went:
        return None  # the result could not be sent: the worker has a failure instead
    # The child does not know the lease's expiry; the ack does not read it (it is fenced
    # on the attempt), so the handler's deadline stands in.
    lease = Lease(run_id, attempt, task["queue"], task["shard"], from_us(task["deadline"]))
    outcome = Outcome(lease=lease, outcome=AttemptOutcome.SUCCEEDED, result=result,
                      took_s=finished - began, watched=True)
    offer = continuation.Offer(config.worker_id, frozenset(config.queues), 1, config.ttl_s)
    connection = connections[config.using]
    try:
        if not session_idle(connection):
            # The handler left a transaction open: the ack would be part of it, never
            # committed. Closing the session rolls the handler's work back, as the end
            # of its process would; the worker acks.
            connection.close()
            raise RuntimeError("the handler left a transaction open")
        from runs.brokers import get_broker

        # The runs this ack makes continue the attempt's span (runs/tracing.py).
        with tracing.releasing(task.get("span") and {run_id: task["span"]}):
            accepted, books = get_broker(config.using, config.broker).complete_only(
                [outcome], offer)
    except Exception:  # noqa: BLE001 - whatever it was, the worker acks instead
        connection.close_if_unusable_or_obsolete()
        send(("ack_back", run_id))
        return None
    if not accepted[0]:
        send(("ack_back", run_id))  # refused: the worker's ack reports it as it would
        return None
    nxt = None
    if offer.taken and offer.taken[0][0].task is not None:
        nxt = continued_task(offer.taken[0][0], seq)
        if tracing.on():
            tracing.fill([nxt], config.using)  # a workflow node's (runs/tracing.py)
        with lock:
            control[0] = seq  # started: the worker's take_back must not count it waiting
    quiet(("acked", run_id, attempt, outcome.outcome, outcome.error, outcome.fate,
          offer.pushed, books_wire(books), seq if nxt is not None else 0, time.monotonic()),
          main=went == "main")
    return nxt


def session_idle(connection) -> bool:
    """Whether the child's database session (a Django connection) is outside any
    transaction: autocommit on, no atomic block, and PostgreSQL's own status idle (a
    handler's raw BEGIN leaves Django's flags as they were)."""
    if connection.in_atomic_block or not connection.get_autocommit():
        return False
    from psycopg.pq import TransactionStatus

    return connection.connection.info.transaction_status == TransactionStatus.IDLE


def continued_task(lease: Lease, seq: int) -> dict:
    """The task of a run an ack continued on this child (as runs/worker/lease_ahead.py's
    hand would build it), numbered ``seq``."""
    t = lease.task
    return {**wire.task_of(lease.run_id, lease.attempt, t), "seq": seq, "watched": True,
            "queue": lease.queue, "shard": lease.shard,
            "deadline": time.time_ns() // 1000 + t["timeout_s"] * 1_000_000}
