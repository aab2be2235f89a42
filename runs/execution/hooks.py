"""Hooks the engine calls at a run's state changes, for apps above it to follow runs
(workflows/: a node's run succeeding starts its downstream nodes). runs never imports
those apps: they register a RunListener here when Django starts (AppConfig.ready), so
the dependency still points one way (docs/architecture.md, "Code layout and dependency
rule").

Every notification is made inside the transaction that changes the runs, so what a
listener writes commits or rolls back with the change itself (the downstream run is
created in the ack's transaction). A listener's error is logged and rolled back to a
savepoint, never the caller's change: the listener is expected to repair what it missed
by a reconcile of its own (workflows/reconcile.py).
"""

import logging
from collections.abc import Callable

from django.db import transaction

log = logging.getLogger("scheduler.hooks")

SUCCEEDED, DEAD, REQUEUED, CANCELLED = "succeeded", "dead", "requeued", "cancelled"
# not started by its expiry, ended at lease time (runs/execution/transitions.py)
EXPIRED = "expired"


class RunListener:
    """What an app implements to follow runs. ``watched`` tells which runs it follows
    (one query; called outside a transaction by the ack, so it must only depend on rows
    committed before the runs could be leased), ``watched_sql`` the same as an SQL
    condition the ack's one statement embeds. ``refuse_result`` may refuse a watched
    run's result at its ack (a reason: the attempt fails and the run goes to the dead
    letter). ``changed`` is told of runs that reached ``event`` (SUCCEEDED, DEAD,
    REQUEUED, CANCELLED, EXPIRED) at ``now`` (database clock), inside the transaction;
    it is sure to hear of a success only of a run it watches (another listener's own
    ack, ack_successes, tells no one else: jobs/callbacks.py and workflows/ watch apart)."""

    def watched(self, run_ids: list[int], using: str) -> set[int]:
        return set()

    def watched_sql(self, run_id: str) -> str:
        """An SQL condition true when the run whose id is the SQL expression ``run_id`` is
        watched (PostgreSQL): the one-statement ack leaves those runs to the general
        path, without a read of its own."""
        return "false"

    def refuse_result(self, run_id: int, result) -> str | None:
        return None

    def changed(self, event: str, run_ids: list[int], now, using: str) -> None:
        pass

    def requeue_revives(self, run_ids: list[int], using: str) -> dict[int, int]:
        """{run id: how many more runs this app will make, in time, of the requeue of
        that run} (a workflow node's descendants marked upstream_failed, pending again
        once it is requeued), for the requeue's ``max_pending`` check; runs left out
        revive nothing. Called inside the requeue's transaction."""
        return {}

    def promised(self, bounds, using: str) -> int:
        """How many runs this app has admitted for the owner of ``bounds``
        (runs.tenancy.quotas.Bounds) and will make later without asking the quota again (the
        nodes not yet started of its live workflow runs)."""
        return 0

    def ack_successes(self, outcomes: list, using: str) -> list[bool] | None:
        """Ack ``outcomes`` (successes without log lines, every one of a run this listener
        watches, results accepted by refuse_result) itself, doing in the same
        transaction what ``changed(SUCCEEDED, ...)`` would, in fewer round trips; returns
        per outcome whether it was applied, or None to leave the batch to the caller's
        general path (then nothing may have changed). The worker's offer is
        runs/continuation.current()."""
        return None


_listeners: list[RunListener] = []
# One-off jobs the history retention must keep although no run is left: (table, column)
# of rows pointing at jobs_job that need it (a workflow's node keeps its job).
_job_keepers: list[tuple[str, str]] = []
# Runs the history retention must keep although they are prunable: SQL SELECTs of one
# column of run ids (a succeeded workflow node's run holds the result a downstream node
# still has to read).
_run_keepers: list[str] = []
_context: dict[str, Callable] = {}
# What a run holds up, shown by the admin's run and dead letter pages: (annotate,
# describe) pairs (workflows/: the workflow run a dead node's run holds up).
_holders: list[tuple[Callable, Callable]] = []


def register(listener: RunListener) -> None:
    """Add ``listener`` (once; registering the same object again does nothing)."""
    if listener not in _listeners:
        _listeners.append(listener)


def keep_jobs(table: str, column: str) -> None:
    """Tell the history retention (runs/history/retention.py) to keep every one-off job
    whose id is in ``table.column``, even when its last run was pruned."""
    if (table, column) not in _job_keepers:
        _job_keepers.append((table, column))


def job_keepers() -> list[tuple[str, str]]:
    return list(_job_keepers)


def keep_runs(select: str) -> None:
    """Tell the history retention (runs/history/retention.py, runs/history/time_partitions.py) to
    keep the runs whose ids ``select`` returns, although they finished before the cutoff:
    ``select`` is an SQL SELECT of one column of run ids (no NULL, no ORDER BY), in
    which ``{runs}`` stands for the runs table (a relation with at least the columns id
    and state; while a time partition is retired, its detached rows are included)."""
    if select not in _run_keepers:
        _run_keepers.append(select)


def kept_runs_sql(runs: str) -> str | None:
    """The run keepers' SELECTs as one (UNION), with ``{runs}`` replaced by ``runs``; None
    when nothing registered one."""
    if not _run_keepers:
        return None
    # No parentheses around each: SQLite reads ``id IN ((SELECT ...))`` as a list of one
    # scalar subquery (its first row, NULL when empty).
    return " UNION ".join(select.format(runs=runs) for select in _run_keepers)


def provide_context(name: str, factory: Callable) -> None:
    """Make ``factory(ctx)`` the value of the handler context's attribute ``name``
    (runs/context.py; ``upstream``: the results of a workflow node's upstreams)."""
    _context[name] = factory


def context_value(name: str, ctx, default):
    factory = _context.get(name)
    return default if factory is None else factory(ctx)


def provide_holder(annotate: Callable, describe: Callable) -> None:
    """Show in the admin what a run holds up (runs/admin/run_admin.py, "holds up"):
    ``annotate(runs)`` returns the Run QuerySet ``runs`` annotated with what ``describe``
    needs (one subquery, so a page of runs costs no query per row), ``describe(run)`` a list
    of (text, admin URL) pairs, empty when the run holds nothing up."""
    if (annotate, describe) not in _holders:
        _holders.append((annotate, describe))


def annotate_holders(runs):
    """``runs`` (a Run QuerySet) with every holder's annotations."""
    for annotate, _ in _holders:
        runs = annotate(runs)
    return runs


def holders_of(run) -> list[tuple[str, str]]:
    """What ``run`` (from a QuerySet annotate_holders made) holds up: (text, URL) pairs."""
    return [pair for _, describe in _holders for pair in describe(run)]


def requeue_revives(run_ids: list[int], using: str) -> dict[int, int]:
    """The listeners' RunListener.requeue_revives of ``run_ids``, summed per run."""
    found: dict[int, int] = {}
    for listener in _listeners:
        for run_id, count in listener.requeue_revives(run_ids, using).items():
            found[run_id] = found.get(run_id, 0) + count
    return found


def promised(bounds, using: str) -> int:
    """The listeners' RunListener.promised for the owner of ``bounds``, summed."""
    return sum(listener.promised(bounds, using) for listener in _listeners)


def watched(run_ids: list[int], using: str) -> set[int]:
    """The runs among ``run_ids`` some listener follows (no query without listeners)."""
    if not _listeners or not run_ids:
        return set()
    found: set[int] = set()
    for listener in _listeners:
        found |= listener.watched(run_ids, using)
    return found


def watching() -> bool:
    """Whether any listener is registered."""
    return bool(_listeners)


def watched_sql(run_id: str) -> str:
    """The listeners' watched_sql conditions on the SQL expression ``run_id``, OR-ed."""
    return "(" + " OR ".join(f"({listener.watched_sql(run_id)})"
                             for listener in _listeners) + ")"


def _fast() -> RunListener | None:
    """The one listener that offers its own ack (RunListener.ack_successes), or None."""
    offering = [listener for listener in _listeners
                if type(listener).ack_successes is not RunListener.ack_successes]
    return offering[0] if len(offering) == 1 else None


def others_watched_sql(run_id: str) -> str:
    """The watched_sql conditions on ``run_id`` of the listeners other than the one that
    offers its own ack, OR-ed ("false" when there are none): a run they match must be
    acked in the general path's transaction, which tells every listener."""
    fast = _fast()
    others = [f"({listener.watched_sql(run_id)})" for listener in _listeners
              if listener is not fast]
    return "(" + " OR ".join(others) + ")" if others else "false"


def ack_successes(outcomes: list, using: str, checked: bool = False) -> list[bool] | None:
    """The own ack of ``outcomes`` (RunListener.ack_successes) of the one listener that
    offers one, or None: none or several offer one, or another listener watches one of
    the runs (it must be told in the general path's transaction). ``checked``: the
    caller knows no other listener watches them (others_watched_sql said so in its
    statement, or they are runs that ack made and continued: workflow nodes); else each
    other listener's ``watched`` is asked, one query each."""
    fast = _fast()
    if fast is None:
        return None
    run_ids = [o.lease.run_id for o in outcomes]
    if not checked and any(listener.watched(run_ids, using) for listener in _listeners
                           if listener is not fast):
        return None
    return fast.ack_successes(outcomes, using)


def refuse_result(run_id: int, result) -> str | None:
    """Why a listener refuses a watched run's result, or None."""
    for listener in _listeners:
        reason = listener.refuse_result(run_id, result)
        if reason:
            return reason
    return None


def notify(event: str, run_ids: list[int], now, using: str) -> None:
    """Tell every listener that ``run_ids`` reached ``event``; call inside the transaction
    that changed them. Each listener runs in a savepoint: its error is logged and undone,
    the caller's change stands."""
    if not _listeners or not run_ids:
        return
    for listener in _listeners:
        try:
            with transaction.atomic(using=using):
                listener.changed(event, run_ids, now, using)
        except Exception:  # noqa: BLE001 - a listener must never undo an ack
            log.exception("run listener %s failed on %s runs %s; its reconcile repairs it",
                          type(listener).__name__, event, run_ids[:20])
