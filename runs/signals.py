"""Django signals for in-process hooks on run outcomes (docs/alerts.md, "Signals").

Each is sent once per run, after the transaction that recorded the outcome committed, in
the process that recorded it: the worker (``run_succeeded``, ``run_failed``,
``run_retrying``, ``run_dead``, ``run_cancelled`` for the outcomes it acks) and the
dispatcher (``run_failed``, ``run_retrying``, ``run_dead`` for runs whose lease expired).
A receiver runs in that daemon's main loop: keep it short (queue slow work as a job).
A receiver that raises is logged and does not stop the others (``send_robust``).

Every signal is sent with ``sender=None`` and the keyword arguments ``run_id``,
``job_id`` (None when the process does not know it at no cost: the dispatcher's reaps),
``handler`` (likewise), ``attempt``, ``outcome`` (the attempt's AttemptOutcome value)
and ``error`` (empty for a success). ``run_succeeded`` adds ``result``; ``run_retrying``
is sent for a failed attempt that will be retried, ``run_dead`` for one that was the
last; ``run_failed`` for either, before them.
"""

import logging

from django.dispatch import Signal

log = logging.getLogger("scheduler.signals")

run_succeeded = Signal()
run_failed = Signal()
run_retrying = Signal()
run_dead = Signal()
run_cancelled = Signal()
# A run not started by its expiry (runs/execution/expiry.py): sent by the process whose lease
# expired it, with outcome "expired" and the attempts the run had started.
run_expired = Signal()

BY_FATE = {"succeeded": run_succeeded, "retrying": run_retrying, "dead": run_dead,
           "cancelled": run_cancelled, "expired": run_expired}


def send(fate: str, **kwargs) -> None:
    """Send the signals of a run whose attempt ended with ``fate`` (succeeded, retrying,
    dead, cancelled): ``run_failed`` first for a failed attempt, then the fate's own.
    Costs nothing when no receiver is connected."""
    signals = [BY_FATE[fate]] if fate in BY_FATE else []
    if fate in ("retrying", "dead"):
        signals.insert(0, run_failed)
    for signal in signals:
        if not signal.receivers:
            continue
        for receiver, answer in signal.send_robust(sender=None, **kwargs):
            if isinstance(answer, Exception):
                log.error("signal receiver %r raised: %r", receiver, answer)
