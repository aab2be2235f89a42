"""What the daemons do after a run's outcome committed: one log line per outcome, the
Django signals of runs/signals.py, and the counts behind the Prometheus counter
``scheduler_runs_total`` (docs/alerts.md, "Logs", "Signals" and "Metrics").

The log line is what a Celery or RQ user reads in the console: INFO on the logger
``scheduler.runs`` (WARNING for a run that died), with the fields also as attributes of
the record (``run_id``, ``job_id``, ``handler``, ``attempt``, ``outcome``, ``state``,
``duration_s``), which LOG_FORMAT=json turns into keys. Counting is in memory, a dict
increment per outcome; ``flush_counts`` adds the counts to the database every few seconds
(the worker's heartbeat, the dispatcher's lease renewal), never per run.
"""

import logging

from runs import signals
from runs.alerts.models import OutcomeCount
from runs.daemons.counts import CountTable

log = logging.getLogger("scheduler.runs")

_table = CountTable(OutcomeCount, ("queue", "outcome"))


def last_line(error: str) -> str:
    """The line of an error that says what happened: a traceback's last non-blank line."""
    lines = [line for line in error.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def report(*, run_id: int, job_id: int | None, handler: str | None, attempt: int,
           outcome: str, state: str, duration_s: float | None, error: str = "",
           queue: str | None = None, result=None) -> None:
    """Log, signal and count one acked outcome: ``outcome`` is the attempt's
    (AttemptOutcome value), ``state`` the run's state after it (succeeded, retrying,
    dead, cancelled), ``duration_s`` the seconds the handler ran (None: not known, e.g.
    a lease that expired)."""
    fields = {"run_id": run_id, "job_id": job_id, "handler": handler, "attempt": attempt,
              "outcome": outcome, "state": state,
              "duration_s": None if duration_s is None else round(duration_s, 6)}
    level = logging.WARNING if state == "dead" else logging.INFO
    if log.isEnabledFor(level):
        took = "" if duration_s is None else f" in {duration_s:.3f} s"
        said = "" if state == "succeeded" else f": {last_line(error)}"
        verb = outcome if outcome == state else f"{outcome}, {state}"
        # The record made here and handed to the logger, as Logger.log does, less its
        # walk up the stack for the caller's file and line, which no format here shows
        # (a tenth of the line's cost, at a line per run); the line is report's.
        log.handle(log.makeRecord(
            log.name, level, __file__, REPORT_LINE,
            "run %s %s (job %s, handler %s, attempt %s%s)%s",
            (run_id, verb, job_id if job_id is not None else "?", handler or "?", attempt,
             took, said), None, "report", fields))
    if queue is not None:
        _table.add(queue, state)
    signals.send(state, run_id=run_id, job_id=job_id, handler=handler, attempt=attempt,
                 outcome=outcome, error=error,
                 **({"result": result} if state == "succeeded" else {}))


# The record's line number: report's own, where a format asks for %(lineno)d.
REPORT_LINE = report.__code__.co_firstlineno


def after_reap(rows: list[tuple], fates: dict[int, str], errors: dict[int, str]) -> None:
    """After a reap committed (runs/execution/transitions.py, ``expire_leases``): the line, the
    signals and the count of each run it retried or dead-lettered. ``rows`` are ``(run id,
    attempt, max_attempts, worker id, queue)``."""
    for run_id, attempt, _, _, queue in rows:
        if run_id in fates:
            report(run_id=run_id, job_id=None, handler=None, attempt=attempt,
                   outcome="lease_expired", state=fates[run_id], duration_s=None,
                   error=errors[run_id], queue=queue)


def flush_counts(using: str) -> None:
    """Add the outcomes counted since the last flush to OutcomeCount, in one statement;
    on failure the counts are kept for the next flush and the error is raised."""
    _table.flush(using, raise_errors=True)


def counts(using: str) -> list[tuple[str, str, int]]:
    """``(queue, outcome, count)`` of every run outcome counted so far (database)."""
    return _table.totals(using)
