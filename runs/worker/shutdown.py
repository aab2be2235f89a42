"""Shutdown: SIGTERM stops leasing, lets in-flight runs finish for up to WORKER_GRACE_S,
then releases the rest at once (they go straight back to ready); a second SIGTERM
releases everything in flight immediately (docs/architecture.md, "Daemons").
"""

import logging
import time

from runs.clock import db_now
from runs.daemons.daemon import STOP_BOUND_S
from runs.execution.outcomes import flush_counts
from runs.models import WorkerProcess
from runs.worker import recycle

log = logging.getLogger("scheduler.worker")


class Shutdown:
    """The worker's stop: when it may end (keep_going) and what a stopping worker does
    with the runs it holds (run). Owns when the stop was asked (``requested_at``,
    time.monotonic()) and the grace for the runs in flight (``grace_s``). The Worker
    calls it from its Daemon hooks (request_stop, keep_going, stop_bound_s, shutdown)."""

    def __init__(self, config, broker, children, ahead, lease, acks, child_acks,
                 supervisor):
        self.config = config
        self.grace_s = config.grace_s
        self.broker = broker
        self.children = children
        self.ahead = ahead
        self.lease = lease
        self.acks = acks
        self.child_acks = child_acks
        self.supervisor = supervisor
        self.requested_at: float | None = None

    def requested(self) -> None:
        """A stop was asked (the first time counts)."""
        if self.requested_at is None:
            self.requested_at = time.monotonic()

    def bound_s(self) -> float:
        """The grace for runs in flight, then the daemons' bound for the rest."""
        return self.grace_s + STOP_BOUND_S

    def keep_going(self, stopping: bool, forced: bool) -> bool:
        """Whether the worker runs another round: until stopping, then while it holds
        runs and the grace lasts; never once ``forced``."""
        if forced:
            return False
        if not stopping:
            return True
        in_grace = time.monotonic() - (self.requested_at or 0) < self.grace_s
        return bool((self.children.in_flight() or self.acks.busy() or len(self.ahead)
                     or self.lease.busy()) and in_grace)

    def run(self) -> None:
        """Stop the children, ack what they finished, release every run still held, and
        record the worker stopped."""
        self.lease.wait()  # its runs are released below
        # Stop the children before deciding what to release: a run that finishes between
        # the release and the kill would have run to its end yet be recorded released.
        # What they finished before dying is in their pipes, and is acked.
        for slot in self.children.slots:
            for message in slot.halt():
                self.supervisor.handle_message(slot, message)
            # A success its child was acking when it stopped: acked here, not released.
            self.child_acks.take_pending(slot)
        self.acks.drain()
        busy = [run.lease for run in self.children.handed() if not run.lost]
        busy += [leased.lease for leased in self.ahead.take_all()]
        if busy:
            released = self.broker.release(busy)
            log.info("worker %s: released %d in-flight runs", self.config.worker_id,
                     len(released))
        self.children.kill()
        if self.child_acks.acked_in_children:
            log.info("worker %s: %d runs acked in its children (runs/worker/handoff.py)",
                     self.config.worker_id, self.child_acks.acked_in_children)
        flush_counts(self.config.using)
        recycle.flush_counts(self.config.using)
        WorkerProcess.objects.using(self.config.using).filter(
            worker_id=self.config.worker_id).update(stopped_at=db_now(self.config.using))
