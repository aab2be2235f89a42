"""Stopping the handler of a run cancelled while it runs (docs/architecture.md,
"Cancelling a running run").

The cancel is in the database (runs/services.py, cancel: the run and its attempt become
``cancelled``). Every CANCEL_CHECK_S the worker asks, in one read by primary key, whether
any run it has been executing for at least that long was cancelled; short runs, the hot
path, never cost a query. A cancelled run's child gets SIGUSR1 (RunCancelled is raised in
the handler: runs/worker/child.py) and is killed if the handler has not returned
CANCEL_GRACE_S later. Either way the worker sends the outcome ``cancelled`` with the run's
log lines: its ack is refused (the run is no longer running) but the lines are kept on the
attempt.
"""

import logging
import time
from collections.abc import Callable

from django.db import connections

from runs.daemons.daemon import TRANSIENT
from runs.models import AttemptOutcome
from runs.types import Outcome
from runs.worker.pool import InFlight, Slot, streamed_logs

log = logging.getLogger("scheduler.worker")


def cancelled_outcome(run: InFlight, logs: list, how: str) -> Outcome:
    """The outcome a worker sends for cancelled ``run``; ``how`` says how the handler
    ended."""
    return Outcome(lease=run.lease, outcome=AttemptOutcome.CANCELLED,
                   error=f"cancelled while running; {how}", logs=logs, task=run.task)


class Cancels:
    """The worker's watch for cancelled runs: check each round (the Worker), expired
    from the supervisor's deadlines. Owns when the next check is due (``next_check``,
    time.monotonic()); reads ``children``, sends outcomes to ``acks``; a child it kills
    is replaced and its waiting runs go back to ``ahead``."""

    def __init__(self, config, broker, children, ahead, acks, child_acks,
                 note_failure: Callable):
        self.check_s = config.cancel_check_s
        self.grace_s = config.cancel_grace_s
        self.using = config.using
        self.broker = broker
        self.children = children
        self.ahead = ahead
        self.acks = acks
        self.child_acks = child_acks
        self.note_failure = note_failure
        self.next_check = 0.0

    def due_in(self, now: float) -> float:
        """Seconds from ``now`` (time.monotonic()) to the next check."""
        return self.next_check - now

    def check(self) -> None:
        """At most every ``check_s``: signal the children whose run, executing for that
        long, was cancelled. A failed read is retried at the next check."""
        now = time.monotonic()
        if now < self.next_check:
            return
        self.next_check = now + self.check_s
        long = [(slot, run) for slot in self.children.in_flight() for run in slot.executing()
                if run.cancel_deadline == float("inf") and run.pending is None
                and now - run.began >= self.check_s]
        if not long:
            return
        try:
            cancelled = self.broker.cancelled([run.lease for _, run in long])
        except TRANSIENT as exc:
            # The round goes on (outcomes to collect, deadlines to keep); a broken
            # connection is replaced before the next query, as serve() does after a round.
            self.note_failure("cancel check", exc)
            connections[self.using].close_if_unusable_or_obsolete()
            return
        for slot, run in long:
            if run.lease.run_id in cancelled:
                log.warning("worker: run %s was cancelled; stopping its handler "
                            "(killed if still running in %s s)",
                            run.lease.run_id, self.grace_s)
                run.cancel_deadline = now + self.grace_s
                slot.signal_cancel(run)

    def expired(self, slot: Slot) -> None:
        """``slot``'s cancelled run did not stop within the grace: kill its child."""
        run = slot.current
        log.warning("worker: cancelled run %s still running after %s s; killing its "
                    "child", run.lease.run_id, self.grace_s)
        self.acks.add(cancelled_outcome(
            run, streamed_logs(run),
            f"the handler did not stop within {self.grace_s} s and was killed"))
        self.ahead.requeue(self.children.restart(slot))
        self.child_acks.allow()
