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

from django.db import connections

from runs.brokers import get_broker
from runs.clock import db_now
from runs.daemons.daemon import TRANSIENT, Daemon
from runs.execution.outcomes import flush_counts
from runs.models import WorkerProcess
from runs.worker import child as child_process
from runs.worker import handoff
from runs.worker.acks import Acks
from runs.worker.ahead import Ahead
from runs.worker.cancels import Cancels
from runs.worker.child_acks import BookKeeper, ChildAcks
from runs.worker.config import WorkerConfig
from runs.worker.lanes import Lanes
from runs.worker.lease_ahead import LEASES_IN_FLIGHT, LeaseAhead
from runs.worker.pool import Children
from runs.worker.recycle import Recycler
from runs.worker.recycle import limits as recycle_limits
from runs.worker.shutdown import Shutdown
from runs.worker.supervise import Supervisor
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


class Worker(Daemon):
    """Run leased runs of ``queues`` in ``concurrency`` child processes (None:
    default_concurrency()).

    ``max_runs`` stops the worker after that many finished runs; ``burst`` stops it once
    nothing is ready and nothing is in flight (both make the daemon testable).
    ``weights`` (queue -> positive int) splits lease capacity between the queues by weight
    (Broker.lease); without it the queues are served in the order given.
    ``max_runs_per_child`` and ``max_memory_per_child_mb`` (MiB) recycle the children
    (runs/worker/recycle.py; None: the settings; 0: never); ValueError when negative.

    It owns its parts and wires them (docs/architecture.md, "runworker"): the children
    (Children), the runs leased ahead (Ahead), the leasing (LeaseAhead), the acks (Acks,
    with the children's books: BookKeeper), the children's acks (ChildAcks), the cancels
    (Cancels), the recycling (Recycler), the supervisor (Supervisor) and the stop
    (Shutdown). Its own state is only the Daemon's: ``stopping`` and ``forced``.
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
        async_per_child = conf.get("ASYNC_CONCURRENCY_PER_CHILD")
        if async_per_child < 1:
            raise ValueError(f"SCHEDULER_ASYNC_CONCURRENCY_PER_CHILD must be at least 1, "
                             f"not {async_per_child}")
        self.config = config = WorkerConfig(
            queues=queues, weights=weights,
            worker_id=f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}",
            concurrency=concurrency, max_runs=max_runs, burst=burst,
            poll_s=conf.get("WORKER_POLL_S"), heartbeat_s=conf.heartbeat_interval(),
            cancel_check_s=conf.get("CANCEL_CHECK_S"),
            cancel_grace_s=conf.get("CANCEL_GRACE_S"),
            grace_s=conf.get("WORKER_GRACE_S") if grace_s is None else grace_s,
            recycle=recycle_limits(max_runs_per_child, max_memory_per_child_mb),
            using=using, async_per_child=async_per_child)
        self.worker_id = config.worker_id
        self.queues = queues
        self.broker = broker = get_broker(using)
        stopping, failed = self.is_stopping, self.note_failure
        # The wake-up pipe is made here, its threads at their first call (Lanes).
        self.lanes = lanes = Lanes(lease_threads=LEASES_IN_FLIGHT)
        self.children = children = Children(lanes)
        self.ahead = ahead = Ahead()
        self.books = books = BookKeeper(broker, lanes)
        self.acks = acks = Acks(config, broker, lanes, ahead, children, books, stopping,
                                failed)
        self.child_acks = child_acks = ChildAcks(config, ahead, children, acks, books,
                                                 stopping)
        self.lease = lease = LeaseAhead(config, broker, lanes, ahead, children, acks,
                                        child_acks, stopping, failed)
        self.cancels = cancels = Cancels(config, broker, children, ahead, acks, child_acks,
                                         failed)
        recycler = Recycler(config.recycle, children, ahead, child_acks, stopping)
        self.supervisor = supervisor = Supervisor(
            config, broker, lanes, children, ahead, lease, acks, child_acks, cancels,
            recycler, self.register, failed)
        self.stop = Shutdown(config, broker, children, ahead, lease, acks, child_acks,
                             supervisor)

    def is_stopping(self) -> bool:
        return self.stopping

    # What tests and operators read of the parts.
    @property
    def slots(self):
        return self.children.slots

    @property
    def finished(self) -> int:
        return self.acks.finished

    @property
    def acked_in_children(self) -> int:
        return self.child_acks.acked_in_children

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
                self.child_acks.enable(handoff.Handoff(
                    self.worker_id, tuple(self.queues), conf.get("LEASE_TTL_S"),
                    self.using, self.broker.name))
            self.children.start(self.config.concurrency, self.child_acks.handoff,
                                self.config.recycle.max_runs)
            try:
                self.register()
            except TRANSIENT as exc:
                raise SchedulerError(
                    f"registering the worker failed ({type(exc).__name__}: "
                    f"{(str(exc).strip() or '-').splitlines()[0][:200]})") from exc
            self.log.info("worker %s: %d slots on queues %s", self.worker_id,
                          self.config.concurrency, ",".join(self.queues))
            super().serve(max_rounds)
        finally:
            self.children.kill()
            self.lanes.close()
            self.broker.end_waits()

    def register(self) -> None:
        """Record this worker (and refresh its heartbeat) for operators, and add the run
        outcomes counted since the last time to the database (runs/execution/outcomes.py)."""
        flush_counts(self.using)
        now = db_now(self.using)
        WorkerProcess.objects.using(self.using).update_or_create(
            worker_id=self.worker_id,
            defaults={"last_heartbeat_at": now},
            create_defaults={
                "hostname": socket.gethostname(), "pid": os.getpid(), "queues": self.queues,
                "concurrency": self.config.concurrency, "started_at": now,
                "last_heartbeat_at": now,
            },
        )

    def request_stop(self, signum=None, frame=None) -> None:
        self.stop.requested()
        super().request_stop(signum, frame)
        # Its loop may be sleeping to a run's time, up to WORKER_POLL_S, with no lane
        # call in flight to wake it.
        self.lanes.wake()

    def stop_bound_s(self) -> float:
        return self.stop.bound_s()

    def keep_going(self) -> bool:
        return self.stop.keep_going(self.stopping, self.forced)

    def shutdown(self) -> None:
        self.stop.run()

    # --- one round --------------------------------------------------------------------

    def ran_out(self) -> bool:
        """Whether ``max_runs`` runs have finished (acked, here or in the children)."""
        return self.config.max_runs is not None and self.acks.finished >= self.config.max_runs

    def wait_s(self) -> float:
        """Seconds this round waits for a child's message or a lane's answer: never past
        the moment outcomes held here may be acked (no ack in flight will wake the loop:
        a failed ack's pause), and none once stopping with nothing in flight. Such a
        round (an ack's answer woke the one before) has nothing left that would wake it,
        and waited out a whole WORKER_POLL_S."""
        if self.acks.outcomes and not self.acks.acking:
            return min(self.supervisor.wait_timeout(),
                       max(0.0, self.acks.paused_until - time.monotonic()))
        if (self.stopping and not self.children.in_flight() and not self.lease.busy()
                and not self.acks.acking):
            return 0.0
        return self.supervisor.wait_timeout()

    def round(self) -> bool:
        self.lease.harvest()
        self.acks.harvest()
        # Outcomes held for the ack just harvested go now: this round may wait up to
        # WORKER_POLL_S for a child or a lease, and the ack's answer was its only wake-up.
        self.acks.flush()
        self.books.keep()
        if self.ran_out():
            # Counted by this harvest: stop before a wait for nothing, up to WORKER_POLL_S.
            self.stopping = True
            return True
        if self.stopping and len(self.ahead):
            self.lease.release_ahead()
        self.lease.lease_more()
        self.child_acks.allow()
        self.supervisor.collect(self.wait_s())
        self.cancels.check()
        self.supervisor.enforce_deadlines()
        self.lease.take_back_stalled()
        self.acks.flush()
        self.supervisor.heartbeat_if_due()
        if (self.config.burst and self.ahead.idle and not self.children.in_flight()
                and not self.acks.busy() and not len(self.ahead) and not self.lease.busy()):
            self.stopping = True
        if self.ran_out():
            self.stopping = True
        return True
