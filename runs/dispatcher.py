"""The dispatcher daemon (``rundispatcher``): promotes due runs to ready, reaps expired
leases (retry with backoff or dead letter), and reconciles the database with the broker so
that a Redis FLUSHALL or restart loses nothing (DESIGN.md, "Processes").

Several dispatchers may run at once: promote is atomic (one Lua call, or SKIP LOCKED),
reaping is fenced, and reconcile is idempotent.
"""

import time

from jobs import conf
from runs.brokers import get_broker
from runs.daemon import Daemon


class Dispatcher(Daemon):
    """One round: reconcile if the broker lost its state (or RECONCILE_INTERVAL_S passed),
    promote due runs, reap expired leases."""

    name = "dispatcher"

    def __init__(self, using: str = "default"):
        super().__init__(using)
        self.broker = get_broker(using)
        self.interval_s = conf.get("DISPATCH_INTERVAL_S")
        self.reconcile_every_s = conf.get("RECONCILE_INTERVAL_S")
        self.last_reconcile = 0.0

    def round(self) -> bool:
        reconciled = 0
        if (self.broker.needs_reconcile()
                or time.monotonic() - self.last_reconcile >= self.reconcile_every_s):
            # Mark first: a flush during the scan removes the mark and triggers another.
            self.broker.mark_reconciled()
            reconciled = self.broker.reconcile()
            self.last_reconcile = time.monotonic()
            if reconciled:
                self.log.info("dispatcher: reconcile pushed %d runs the broker lacked",
                              reconciled)
        promoted = self.broker.promote()
        reaped = self.broker.reap()
        if reaped:
            self.log.info("dispatcher: %d expired leases retried or dead-lettered", reaped)
        return bool(promoted or reaped or reconciled)
