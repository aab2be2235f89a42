"""The runs a worker has leased ahead and not yet handed to a child (Ahead, one Leased
each), and when it leases next (docs/architecture.md, "runworker"; leasing and handing
out: runs/worker/lease_ahead.py, runs/worker/async_hand.py).
"""

import threading
import time
from collections import deque
from dataclasses import dataclass

from runs.types import Lease
from runs.worker.pool import InFlight

TASK_OVERHEAD = 200  # bytes of a pickled task besides its payload's JSON text

@dataclass
class Leased:
    """A run leased ahead, waiting in the worker for a free child. ``task`` is what the
    child needs (runs/worker/child.py), the payload as the JSON text the database gave: the
    child decodes it, so the worker does not decode and re-encode it per run."""

    lease: Lease
    task: dict
    timeout_s: int
    watched: bool = False  # known to be a workflow node's run (runs/execution/continuation.py)
    is_async: bool = False  # its handler is an async def (runs/worker/async_hand.py)


class Ahead:
    """The runs leased ahead, waiting in the worker for a free child (oldest lease
    first), and when to lease next: ``idle`` (the last lease found none), ``wake_at``
    (time.monotonic() of the next lease while idle; None: now) and ``lease_again`` (an
    ack may have made runs: an empty lease is retried at once). Filled by LeaseAhead and
    by the acks that continued runs here (Acks, ChildAcks); runs a replaced child never
    started come back to its front (requeue). Runs of async handlers wait apart
    (``async_runs``), for a child with room on its event loop (runs/worker/async_hand.py);
    ``runs`` are the others, handed in order."""

    def __init__(self):
        self.runs: deque[Leased] = deque()
        self.async_runs: deque[Leased] = deque()
        self.idle = False
        self.wake_at: float | None = None
        self.lease_again = False
        # Set by wake(retry=True): ends a lease lane's sleep to its next run's time, as
        # it ends the worker loop's idle sleep (runs/worker/lease_ahead.py, lease_at).
        self.nudge = threading.Event()

    def __len__(self) -> int:
        return len(self.runs) + len(self.async_runs)

    def first(self) -> Leased:
        return self.runs[0]

    def pop_first(self) -> Leased:
        return self.runs.popleft()

    def put_front(self, leased: list[Leased]) -> None:
        """``leased`` go first in line, in their order."""
        if any(run.is_async for run in leased):
            self.async_runs.extendleft(reversed([r for r in leased if r.is_async]))
            leased = [run for run in leased if not run.is_async]
        self.runs.extendleft(reversed(leased))

    def requeue(self, runs: list[InFlight]) -> None:
        """Runs a replaced child never started go back to the front of the queue (the
        caller then allows the children's acks again: ChildAcks.allow)."""
        self.put_front([Leased(run.lease, run.task, run.timeout_s, run.watched)
                        for run in runs])

    def take_all(self) -> list[Leased]:
        """Empty the queue; returns what it held."""
        runs = [*self.runs, *self.async_runs]
        self.runs.clear()
        self.async_runs.clear()
        return runs

    def leases(self) -> list[Lease]:
        return [leased.lease for leased in (*self.runs, *self.async_runs)]

    def renew(self, held: dict[tuple[int, int], Lease]) -> list[int]:
        """Keep the runs whose lease a heartbeat renewed (``held``, by (run id, attempt));
        returns the ids of those dropped, their lease lost before they started."""
        lost = []
        for name in ("runs", "async_runs"):
            kept = deque()
            for leased in getattr(self, name):
                lease = held.get((leased.lease.run_id, leased.lease.attempt))
                if lease is None:
                    lost.append(leased.lease.run_id)
                else:
                    leased.lease = lease
                    kept.append(leased)
            setattr(self, name, kept)
        return lost

    def sleeping_until(self) -> float | None:
        """time.monotonic() of the next lease while idle (None: not idle, or now)."""
        return self.wake_at if self.idle else None

    def asleep(self, now: float) -> bool:
        """Whether the worker is idle and its next lease not yet due at ``now``."""
        return self.idle and self.wake_at is not None and now < self.wake_at

    def wake(self, retry: bool = False) -> None:
        """Lease at once rather than after the idle poll; ``retry``: also when a lease
        sent before now comes back empty."""
        self.wake_at = None
        if retry:
            self.lease_again = True
            self.nudge.set()

    def wake_if_idle(self) -> None:
        if self.idle:
            self.wake_at = None

    def leased(self, runs: list[Leased], due_in: float | None, poll_s: float) -> None:
        """A lease answered ``runs`` (queued last), or none with the next run due in
        ``due_in`` s (None: unknown): sleep until then, at most ``poll_s``."""
        self.idle = not runs
        if runs:
            if any(run.is_async for run in runs):
                self.async_runs.extend(run for run in runs if run.is_async)
                runs = [run for run in runs if not run.is_async]
            self.runs.extend(runs)
            return
        if self.lease_again:
            # Sent before an ack that may have made runs (acks.py): lease again now.
            self.lease_again, self.wake_at = False, None
            return
        # Sleep until the next run falls due rather than a whole poll interval, so a run
        # scheduled for an instant starts within a few ms of it.
        wait_s = poll_s if due_in is None else min(due_in, poll_s)
        self.wake_at = time.monotonic() + wait_s
