"""The worker daemon (``runworker``): lease runs, execute them in child processes with a
timeout, heartbeat, ack (fenced) (docs/architecture.md, "runworker").

The worker process holds the database and broker connections and ``concurrency`` child
processes (runs/worker/child.py) that run handler code, one run each at a time (and may
ack a workflow node's success themselves: runs/worker/handoff.py). That is
what lets the worker enforce ``timeout_s`` on a handler stuck in a busy loop (it kills the
child, records the attempt as timed out and starts a new child) and survive a handler that
kills its own process (recorded as crashed). Its leases and acks run in two background
lanes (runs/worker/lanes.py), so neither waits for the other and the children are fed meanwhile.

SIGTERM: stop leasing, let in-flight runs finish for up to WORKER_GRACE_S, release the
rest at once (they go straight back to ready), exit 0. A second SIGTERM releases
everything in flight immediately.
"""

import os
import socket
import time
import uuid
from collections import deque
from concurrent.futures import Future

from django.db import connections

from runs.brokers import get_broker
from runs.clock import db_now
from runs.daemon import TRANSIENT, Daemon
from runs.models import WorkerProcess
from runs.outcomes import flush_counts
from runs.types import Outcome
from runs.worker import child as child_process
from runs.worker import handoff
from runs.worker.acks import AckBatch, Acks
from runs.worker.cancels import Cancels
from runs.worker.child_acks import ChildAcks
from runs.worker.lanes import Lanes
from runs.worker.lease_ahead import LEASES_IN_FLIGHT, LeaseAhead, Leased
from runs.worker.pool import InFlight, Slot
from runs.worker.recycle import limits as recycle_limits
from runs.worker.shutdown import Shutdown
from runs.worker.supervise import Supervision
from scheduler_core import conf
from scheduler_core.exceptions import SchedulerError

# The child processes of a worker when neither --concurrency nor WORKER_CONCURRENCY says:
# the Procfile's and runall's number too (docs/architecture.md, "runworker").
DEFAULT_CONCURRENCY = 4


def default_concurrency() -> int:
    """A worker's child processes when ``--concurrency`` is not given: the environment's
    ``WORKER_CONCURRENCY`` (the Procfile's variable), else DEFAULT_CONCURRENCY. Raises
    ValueError when WORKER_CONCURRENCY is not a whole number."""
    value = os.environ.get("WORKER_CONCURRENCY", "").strip()
    if not value:
        return DEFAULT_CONCURRENCY
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"WORKER_CONCURRENCY={value!r} is not a whole number") from None


class Worker(LeaseAhead, Acks, ChildAcks, Supervision, Cancels, Shutdown, Daemon):
    """Run leased runs of ``queues`` in ``concurrency`` child processes (None:
    default_concurrency()).

    ``max_runs`` stops the worker after that many finished runs; ``burst`` stops it once
    nothing is ready and nothing is in flight (both make the daemon testable).
    ``weights`` (queue -> positive int) splits lease capacity between the queues by weight
    (Broker.lease); without it the queues are served in the order given.
    ``max_runs_per_child`` and ``max_memory_per_child_mb`` (MiB) recycle the children
    (runs/worker/recycle.py; None: the settings; 0: never); ValueError when negative.
    """

    name = "worker"

    def __init__(self, queues: list[str], concurrency: int | None = None,
                 using: str = "default",
                 max_runs: int | None = None, burst: bool = False,
                 grace_s: float | None = None, weights: dict[str, int] | None = None,
                 max_runs_per_child: int | None = None,
                 max_memory_per_child_mb: int | None = None):
        super().__init__(using)
        if concurrency is None:
            concurrency = default_concurrency()
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.queues = queues
        self.weights = weights
        self.recycle = recycle_limits(max_runs_per_child, max_memory_per_child_mb)
        self.concurrency = concurrency
        self.max_runs = max_runs
        self.burst = burst
        self.grace_s = conf.get("WORKER_GRACE_S") if grace_s is None else grace_s
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.broker = get_broker(using)
        self.poll_s = conf.get("WORKER_POLL_S")
        self.heartbeat_s = conf.heartbeat_interval()
        self.cancel_check_s = conf.get("CANCEL_CHECK_S")
        self.cancel_grace_s = conf.get("CANCEL_GRACE_S")
        self.next_cancel_check = 0.0  # time.monotonic() of the next check_cancels
        self.slots: list[Slot] = []
        self.outcomes: list[Outcome] = []
        self.ahead: deque[Leased] = deque()
        self.avg_run_s: float | None = None  # moving average of handler wall time
        self.finished = 0
        self.last_heartbeat = time.monotonic()
        self.stop_requested_at: float | None = None
        self.idle = False
        self.wake_at: float | None = None  # time.monotonic() when the next run falls due
        self.lease_again = False  # an ack may have made runs: an empty lease is retried
        self.lease_paused_until = 0.0
        self.ack_paused_until = 0.0
        self.lanes: Lanes | None = None
        # Lease calls in the lease lane not yet harvested, with the runs each asked for.
        self.leasing: list[tuple[Future, int]] = []
        self.acking: list[tuple[Future, list[Outcome]]] = []  # ack calls in the ack lane
        # id of an ack batch (its outcomes list, alive in ``acking`` until harvested) ->
        # its record: the offer made with it, what its ack continued here and pushed
        # (runs/worker/acks.py, AckBatch; runs/continuation.py).
        self.batches: dict[int, AckBatch] = {}
        self.books_owed: list = []  # Books the children's acks left (runs/worker/child_acks.py)

    # --- lifecycle --------------------------------------------------------------------

    def serve(self, max_rounds: int | None = None) -> None:
        # Children must not inherit open database sockets.
        connections.close_all()
        # What a child's handler context reads from, inherited at fork (ctx.using).
        child_process.WORKER_DATABASE[0] = self.using
        # Everything after the first child is made is inside the try: children ignore
        # SIGTERM and are not daemonic (runs/worker/child.py), so an error between their
        # start and the loop (a registration refused: "database is locked" on SQLite) left
        # the worker waiting on them at exit, for ever.
        try:
            if conf.get("WORKER_CHILD_ACKS") and handoff.usable(self.using):
                self.handoff = handoff.Handoff(self.worker_id, tuple(self.queues),
                                               conf.get("LEASE_TTL_S"), self.using,
                                               self.broker.name)
            for _ in range(self.concurrency):
                self.slots.append(Slot(self.handoff, self.recycle.max_runs))
            self.lanes = Lanes(lease_threads=LEASES_IN_FLIGHT)
            try:
                self.register()
            except TRANSIENT as exc:
                raise SchedulerError(
                    f"registering the worker failed ({type(exc).__name__}: "
                    f"{(str(exc).strip() or '-').splitlines()[0][:200]})") from exc
            self.log.info("worker %s: %d slots on queues %s", self.worker_id,
                          self.concurrency, ",".join(self.queues))
            super().serve(max_rounds)
        finally:
            for slot in self.slots:
                slot.kill()
            if self.lanes is not None:
                self.lanes.close()
            self.broker.end_waits()

    def in_flight(self) -> list[Slot]:
        """Slots whose child has runs."""
        return [slot for slot in self.slots if slot.queued]

    def handed(self) -> list[InFlight]:
        """Every run handed to a child and not finished."""
        return [run for slot in self.slots for run in slot.queued]

    def register(self) -> None:
        """Record this worker (and refresh its heartbeat) for operators, and add the run
        outcomes counted since the last time to the database (runs/outcomes.py)."""
        flush_counts(self.using)
        now = db_now(self.using)
        WorkerProcess.objects.using(self.using).update_or_create(
            worker_id=self.worker_id,
            defaults={"last_heartbeat_at": now},
            create_defaults={
                "hostname": socket.gethostname(), "pid": os.getpid(), "queues": self.queues,
                "concurrency": self.concurrency, "started_at": now, "last_heartbeat_at": now,
            },
        )

    # --- one round --------------------------------------------------------------------

    def round(self) -> bool:
        self.harvest_lease()
        self.harvest_acks()
        self.keep_books()
        if self.stopping and self.ahead:
            self.release_ahead()
        self.lease_more()
        self.allow_child_acks()
        self.collect(self.wait_timeout())
        self.check_cancels()
        self.enforce_deadlines()
        self.take_back_stalled()
        self.flush()
        self.heartbeat_if_due()
        if (self.burst and self.idle and not self.in_flight() and not self.outcomes
                and not self.ahead and not self.acking and not self.leasing):
            self.stopping = True
        if self.max_runs is not None and self.finished >= self.max_runs:
            self.stopping = True
        return True

