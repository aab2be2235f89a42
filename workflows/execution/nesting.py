"""Where the engine hands sub-workflow nodes over (docs/workflows.md, "Sub-workflows").

The engine (engine.py) cannot import subflows.py (both in workflows/execution/), which
starts a child workflow run with the engine's own steps: an import cycle. So subflows registers
its three steps here (subflows.register, which workflows/wiring.py calls when Django
starts), and the engine calls them through this module. Until then, a workflow with a
sub-workflow node cannot have been started, so the defaults do nothing.
"""

from collections.abc import Callable
from datetime import datetime

_steps: dict[str, Callable] = {}


def register(*, start: Callable, ended: Callable, revived: Callable) -> None:
    """Install subflows' steps (callables; see start_children, runs_ended and
    runs_revived for their arguments). Called once, by subflows.register."""
    _steps.update(start=start, ended=ended, revived=revived)


def start_children(rows: list[tuple], now: datetime, using: str,
                   running: set | None) -> list[int]:
    """Start the child workflow runs of the ready sub-workflow node runs ``rows``
    (engine.start_ready's rows, each pending and locked by the caller); returns the
    node run ids started or ended at once. ``now``: the database's time."""
    if not rows:
        return []
    return _steps["start"](rows, now, using, running)


def runs_ended(workflow_run_ids: list[int], now: datetime, using: str) -> None:
    """The workflow runs ``workflow_run_ids`` just ended (succeeded, failed or
    cancelled): the parent node runs of those that are children end with them."""
    if workflow_run_ids and "ended" in _steps:
        _steps["ended"](workflow_run_ids, now, using)


def runs_revived(workflow_run_ids: list[int], now: datetime, using: str) -> None:
    """The failed workflow runs ``workflow_run_ids`` run again (a requeue): the parent
    node runs of those that are children run again with them."""
    if workflow_run_ids and "revived" in _steps:
        _steps["revived"](workflow_run_ids, now, using)
