"""Fault isolation of the daemons (docs/security.md, "Daemons' fault isolation"): an
exception from one item (an alert, a cron job, a workflow) or from one duty of a round
(the dispatcher's reap, reconcile, pruning, alerts, ...) is that item's or duty's
failure, not the process's.

A failure is logged once with its traceback (the first of a streak; later ones of the
same streak are DEBUG for an item, a WARNING line at the 2nd, 4th, 8th, ... for a whole
duty), counted in
DaemonErrorCount (the Prometheus counter ``scheduler_daemon_item_errors_total{daemon,
duty}``), and the item or duty is backed off: 1 s, doubling, at most ITEM_BACKOFF_MAX_S
for an item and DUTY_BACKOFF_MAX_S for a duty, so a poisoned row is not retried every
round while everyone else is served. The database or the broker being unavailable is not
an item's fault: what the daemon's ``transient`` says so goes up to its loop, which waits
and reconnects (runs/daemons/daemon.py).
"""

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable

from runs.alerts.models import DaemonErrorCount
from runs.daemons.counts import CountTable

ITEM_BACKOFF_MAX_S = 600.0
# A duty or round waits at most as long as the outage path does (runs/daemons/daemon.py): a
# worker's round also collects, acks and heartbeats, which must not lapse its leases.
DUTY_BACKOFF_MAX_S = 5.0
# Streaks remembered per daemon; past it the oldest is forgotten (and retried at once).
TRACKED_MAX = 10_000

_table = CountTable(DaemonErrorCount, ("daemon", "duty"))


def count(daemon: str, duty: str) -> None:
    """Count one failure of ``daemon``'s ``duty``, in memory until flush_counts adds it
    to the database."""
    _table.add(daemon, duty)


def flush_counts(using: str = "default") -> None:
    """Add the failures counted since the last flush to DaemonErrorCount in one
    statement; when the database refuses, they are kept for the next flush and nothing
    is raised (a count must not fail the caller)."""
    _table.flush(using)


def counts(using: str = "default") -> list[tuple[str, str, int]]:
    """``(daemon, duty, count)`` of every failure counted so far (database)."""
    return _table.totals(using)


class Faults:
    """The failure streaks of one daemon (``daemon``: its name, the metric's label),
    logged on ``log``, counted in database ``using``. ``transient(exc)`` says whether an
    exception is the database or broker being unavailable: ``run`` raises those. A key of
    None stands for a whole duty."""

    def __init__(self, daemon: str, log: logging.Logger, using: str,
                 transient: Callable[[BaseException], bool]):
        self.daemon = daemon
        self.transient = transient
        self.log = log
        self.using = using
        # (duty, key) -> (failures in a row, time.monotonic() when it may be tried again)
        self.streaks: OrderedDict[tuple[str, Hashable], tuple[int, float]] = OrderedDict()

    def due(self, duty: str, key: Hashable = None) -> bool:
        """Whether ``key`` of ``duty`` may be tried now (not backing off)."""
        streak = self.streaks.get((duty, key))
        return streak is None or time.monotonic() >= streak[1]

    def wait_s(self, duty: str, key: Hashable = None) -> float:
        """Seconds until ``key`` of ``duty`` may be tried again (0: now)."""
        streak = self.streaks.get((duty, key))
        return 0.0 if streak is None else max(streak[1] - time.monotonic(), 0.0)

    def held_back(self, duty: str) -> list:
        """The keys of ``duty`` backing off now (to leave out of a claim)."""
        now = time.monotonic()
        return [key for (name, key), (_, until) in self.streaks.items()
                if name == duty and key is not None and until > now]

    def failed(self, duty: str, key: Hashable, exc: BaseException) -> None:
        """Record that ``key`` of ``duty`` (None: the whole duty) raised ``exc``: log,
        count, back off."""
        failures = self.streaks.pop((duty, key), (0, 0.0))[0] + 1
        cap = DUTY_BACKOFF_MAX_S if key is None else ITEM_BACKOFF_MAX_S
        delay = min(2.0 ** (failures - 1), cap)
        self.streaks[(duty, key)] = (failures, time.monotonic() + delay)
        while len(self.streaks) > TRACKED_MAX:
            self.streaks.popitem(last=False)
        what = duty if key is None else f"{duty} {key}"
        said = (str(exc).strip() or "-").splitlines()[0][:200]
        if failures == 1:
            self.log.error("%s: %s failed (%s: %s); backing it off, serving the rest",
                           self.daemon, what, type(exc).__name__, said, exc_info=exc)
        elif key is None and failures & (failures - 1) == 0:  # 2, 4, 8, ...: not a flood
            self.log.warning("%s: %s failed again (%d in a row: %s: %s); next try in %g s",
                             self.daemon, what, failures, type(exc).__name__, said, delay)
        else:
            self.log.debug("%s: %s failed again (%d in a row)", self.daemon, what, failures)
        count(self.daemon, duty)
        flush_counts(self.using)

    def succeeded(self, duty: str, key: Hashable = None) -> None:
        """Forget ``key``'s streak of failures, if it had one."""
        streak = self.streaks.pop((duty, key), None)
        if streak is not None:
            what = duty if key is None else f"{duty} {key}"
            self.log.info("%s: %s works again after %d failures", self.daemon, what,
                          streak[0])

    def run(self, duty: str, call: Callable, key: Hashable = None, default=None):
        """``call()``'s result, or ``default`` when ``key`` of ``duty`` is backing off or
        the call failed (recorded by ``failed``). Transient errors are raised."""
        if not self.due(duty, key):
            return default
        try:
            result = call()
        except Exception as exc:
            if self.transient(exc):
                raise
            self.failed(duty, key, exc)
            return default
        if self.streaks:
            self.succeeded(duty, key)
        return result


def one_by_one(faults: Faults, duty: str, claimed: list, exc: Exception,
               each: Callable[[Hashable], int]) -> int:
    """After a batch of the ``claimed`` items (keys, e.g. job ids) raised ``exc`` (not
    transient) and rolled back: each item again in a transaction of its own
    (``each(key)``, returning what it made), so that the one that raises is recorded by
    ``faults.failed`` and backed off while the others are served. Returns the sum of what
    ``each`` returned; raises ``exc`` when nothing was claimed (the whole duty failed)."""
    if not claimed:
        raise exc
    if len(claimed) == 1:
        faults.failed(duty, claimed[0], exc)
        return 0
    return sum(faults.run(duty, lambda key=key: each(key), key=key, default=0)
               for key in claimed)
