"""Shutdown: SIGTERM stops leasing, lets in-flight runs finish for up to WORKER_GRACE_S,
then releases the rest at once (they go straight back to ready); a second SIGTERM
releases everything in flight immediately (docs/architecture.md, "Daemons").
"""

import time

from runs.clock import db_now
from runs.daemon import STOP_BOUND_S
from runs.models import WorkerProcess
from runs.outcomes import flush_counts
from runs.worker import recycle


class Shutdown:
    """The worker's stop: when to stop (request_stop, keep_going) and what a stopping
    worker does with the runs it holds (release_ahead, shutdown). A mixin of
    runs/worker/main.py's Worker, whose attributes it uses; it comes before Daemon in
    the Worker's bases, so its methods override Daemon's."""

    def request_stop(self, signum=None, frame=None) -> None:
        if self.stop_requested_at is None:
            self.stop_requested_at = time.monotonic()
        super().request_stop(signum, frame)

    def stop_bound_s(self) -> float:
        """The grace for runs in flight, then the daemons' bound for the rest."""
        return self.grace_s + STOP_BOUND_S

    def keep_going(self) -> bool:
        if self.forced:
            return False
        if not self.stopping:
            return True
        in_grace = time.monotonic() - (self.stop_requested_at or 0) < self.grace_s
        return bool((self.in_flight() or self.outcomes or self.ahead or self.acking
                     or self.leasing) and in_grace)

    def shutdown(self) -> None:
        for future, _ in self.leasing:
            future.exception()  # wait: their runs are released below
        self.harvest_lease()
        # Stop the children before deciding what to release: a run that finishes between
        # the release and the kill would have run to its end yet be recorded released.
        # What they finished before dying is in their pipes, and is acked.
        for slot in self.slots:
            for message in slot.halt():
                self.handle_message(slot, message)
            # A success its child was acking when it stopped: acked here, not released.
            self.take_pending(slot)
        self.flush(force=True)
        self.keep_books(force=True)
        if self.books_call is not None:
            self.books_call.exception()  # adopted before the release below forgets them
        for future, _ in self.acking:
            future.exception()
        self.harvest_acks()
        if self.outcomes:
            # The ack lane failed (database down?): one last try, whose error serve() logs.
            self.broker.complete(self.outcomes)
            self.outcomes = []
        busy = [run.lease for run in self.handed() if not run.lost]
        busy += [leased.lease for leased in self.ahead]
        self.ahead.clear()
        if busy:
            released = self.broker.release(busy)
            self.log.info("worker %s: released %d in-flight runs", self.worker_id, len(released))
        for slot in self.slots:
            slot.kill()
        if self.acked_in_children:
            self.log.info("worker %s: %d runs acked in its children (runs/worker/handoff.py)",
                          self.worker_id, self.acked_in_children)
        flush_counts(self.using)
        recycle.flush_counts(self.using)
        WorkerProcess.objects.using(self.using).filter(worker_id=self.worker_id).update(
            stopped_at=db_now(self.using))

    def release_ahead(self) -> None:
        """Stopping: runs leased ahead go back at once instead of being started."""
        leases = [leased.lease for leased in self.ahead]
        self.ahead.clear()
        released = self.broker.release(leases)
        self.log.info("worker %s: released %d runs leased ahead", self.worker_id,
                      len(released))

