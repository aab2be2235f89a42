"""What follows node runs that ended other than by their own run's ack (docs/workflows.md,
"Mapped nodes" and "Sub-workflows"): a mapped node whose items all ended, a sub-workflow
node whose child ended. The nodes below a success start by their trigger rules, the
rules a failure or a cancel can no longer meet are marked, and each workflow run with
nothing left to do ends."""

from datetime import datetime

from workflows.execution.engine import finish_if_done, settle, start_ready


def after_ended(succeeded: list[tuple[int, int]], ended: list[tuple[int, int]],
                now: datetime, using: str) -> None:
    """Go on from node runs that just ended, in the caller's transaction: ``succeeded``
    and ``ended`` (failed or cancelled) as (workflow run id, node id) pairs; ``now`` the
    database's time (UTC)."""
    running: set[int] = set()
    if succeeded:
        doomed: set[int] = set()
        start_ready({r[0] for r in succeeded}, now, using, below={r[1] for r in succeeded},
                    running=running, doomed=doomed)
        if doomed:
            settle(doomed, (), now, using, running)
    if ended:
        settle({r[0] for r in ended}, {r[1] for r in ended}, now, using, running)
    finish_if_done({r[0] for r in succeeded + ended} - running, now, using)
