"""Value types passed between the broker, the daemons and the services."""

from dataclasses import dataclass, field
from datetime import datetime

Slot = tuple[int, str, int]
"""Where a run sits in the broker: ``(run_id, queue, shard)``."""


@dataclass(frozen=True)
class RunRef:
    """What a broker needs to place a run: its id, queue, shard, priority (0-9),
    ``run_at`` (aware UTC datetime: when it may start), its job's owner id (None: no
    owner; per-owner limits do not apply) and its gate entry (runs/flow/control.py; None: not
    known here, the broker reads it when flow control is in use)."""

    id: int
    queue: str
    shard: int
    priority: int
    run_at: datetime
    owner: int | None = None
    gate: str | None = None


@dataclass(frozen=True)
class Lease:
    """A worker's claim on run ``run_id``; ``attempt`` is the fencing token and
    ``expires_at`` the lease expiry on the database clock (aware UTC)."""

    run_id: int
    attempt: int
    queue: str
    shard: int
    expires_at: datetime
    # What the worker needs to run it, when the lease query could return it at no cost
    # (``job_id``, ``scheduled_at``, ``handler``, ``payload``, ``timeout_s``); not part of
    # the lease's identity.
    task: dict | None = field(default=None, compare=False, repr=False)

    @property
    def slot(self) -> Slot:
        """The run's place in the broker: (run id, queue, shard)."""
        return (self.run_id, self.queue, self.shard)


@dataclass
class Outcome:
    """How one attempt ended, reported by a worker to ``Broker.complete``.

    ``outcome`` is an AttemptOutcome value (succeeded, failed, timed_out, crashed);
    ``logs`` is a list of ``(created_at, level, logger_name, message)`` tuples. For a
    failure, ``retry`` is what the handler asked for (docs/architecture.md, "Handlers"):
    None, the usual backoff; a number, retry after that many seconds (RetryAfter); False,
    no retry, the dead letter at once (PermanentFailure); a tuple of the dotted names of
    the exception's classes (any other exception), matched against the job's retry_on /
    never_retry_on (runs/execution/retry.py).
    """

    lease: Lease
    outcome: str
    result: object = None
    error: str = ""
    logs: list[tuple] = field(default_factory=list)
    # Seconds the handler ran (None: not known); the run's state after the ack
    # (succeeded, retrying, dead, cancelled), set by the ack itself (runs/execution/completion.py).
    took_s: float | None = None
    fate: str = ""
    retry: float | bool | tuple | None = None
    # What the worker ran (``job_id``, ``handler``, …: runs/worker/pool.py's InFlight.task),
    # for the outcome's log line; None when the outcome did not come from a child.
    task: dict | None = field(default=None, repr=False)
    # Set by the ack when a listener follows the run (runs/execution/hooks.py: a workflow
    # node, whose success may have made runs of its downstream nodes): the worker leases
    # again at once. Set before the ack when the worker knows it (a run continued on it by a
    # node's ack, runs/execution/continuation.py): the ack then goes straight to the path
    # that tells listeners.
    watched: bool = False


@dataclass(frozen=True)
class QueueDepth:
    """Depth of one queue: runs ready now, delayed (waiting for run_at), leased."""

    queue: str
    ready: int
    delayed: int
    leased: int


@dataclass
class Books:
    """The broker's bookkeeping an ack owes after its commit (Broker.complete_only, then
    Broker.keep_books): ``finished``, the slots ((run id, queue, shard)) of the runs it
    finished, to forget; ``taken``, the (lease, owner id or None) of the runs it continued
    on the acking worker (runs/execution/continuation.py), to record as leased for ``ttl_s``
    seconds; ``retried``, ids of runs it sent to a retry, to push. Plain data, so a
    worker's child can hand it to its worker (runs/worker/handoff.py)."""

    finished: list[Slot]
    taken: list[tuple[Lease, int | None]]
    ttl_s: float
    retried: list[int]
