"""Runs of ``async def`` handlers on the worker's side (docs/async-handlers.md): how many
to lease for the children's event loops (AsyncRoom) and handing them out (hand_async).

A child runs one sync run at a time, and besides, on its event loop, up to
ASYNC_CONCURRENCY_PER_CHILD async runs (runs/worker/child_async.py). An async run starts
the moment its child reads it, so it is handed only to a child with room; none waits in
a child's pipe, and none is ever taken back. What the worker leases for them is the
room its children's loops have, scaled by the share of async runs among those it
leased lately: a worker whose runs are all sync leases as it always did (AsyncRoom.room
is 0), and one whose runs are all async keeps every loop full.
"""

import time

from runs.worker.ahead import TASK_OVERHEAD, Ahead
from runs.worker.pool import InFlight

# An async run whose handler has not ended this long after its timeout_s blocks its
# child's event loop (or swallows the cancel): its child is killed (supervise.py).
KILL_AFTER_S = 5.0
# The weight of the latest lease in the share of async runs (a moving average).
SHARE_WEIGHT = 0.3
# While async runs are short, runs leased beyond the loops' room, per child, as
# lease_ahead.py's PREFETCH_*: at most AHEAD_PER_CHILD and AHEAD_WINDOW_S of average run
# time, and only while runs average under AHEAD_MAX_RUN_S. Without it the children
# emptied their loops and waited for the next lease (BENCHMARKS.md, "Async handlers").
AHEAD_PER_CHILD = 256
AHEAD_WINDOW_S = 0.05
AHEAD_MAX_RUN_S = 0.02


class AsyncRoom:
    """The share of async runs among the runs this worker leased (``share``, 0 to 1, a
    moving average over leases), the moving average of their handlers' wall time
    (``avg_s``, None until one ended) and the room it gives them (room)."""

    def __init__(self):
        self.share = 0.0
        self.avg_s: float | None = None

    def note_time(self, took: float) -> None:
        """An async handler ran ``took`` seconds."""
        self.avg_s = took if self.avg_s is None else 0.8 * self.avg_s + 0.2 * took

    def note(self, leased: list) -> None:
        """A lease brought ``leased`` (Leased, some async or none)."""
        if leased:
            frac = sum(1 for run in leased if run.is_async) / len(leased)
            self.share += SHARE_WEIGHT * (frac - self.share)
            if self.share < 0.01:
                self.share = 0.0

    def room(self, concurrency: int, per_child: int) -> int:
        """Runs to lease for the event loops of ``concurrency`` children of
        ``per_child`` async runs each, beyond what the sync runs get: their room, and
        while async runs are short as many again to wait here (AHEAD_*)."""
        ahead = 0
        if self.avg_s is not None and self.avg_s < AHEAD_MAX_RUN_S:
            ahead = min(AHEAD_PER_CHILD, int(AHEAD_WINDOW_S / max(self.avg_s, 1e-6)))
        return int(concurrency * (per_child + ahead) * self.share)


def hand_async(ahead: Ahead, slots: list, per_child: int) -> None:
    """Hand the async runs leased ahead (oldest first) to the children with room on their
    loop (fewer than ``per_child`` async runs, not recycling: Slot.full), the least busy
    first; each child's share goes in one message on its async pipe. What waits unread
    in a pipe stays under half its capacity (a child with no async run takes any run)."""
    if not ahead.async_runs:
        return
    now_us = time.time_ns() // 1000
    mono = time.monotonic()
    open_ = [slot for slot in slots if len(slot.running) < per_child and not slot.full]
    batches: dict = {}
    while ahead.async_runs and open_:
        slot = min(open_, key=lambda s: len(s.running))
        leased = ahead.async_runs[0]
        size = TASK_OVERHEAD + len(leased.task["payload"])
        seq = None
        if not slot.running or slot.async_bytes + size <= slot.async_capacity // 2:
            seq = slot.next_seq()
        if seq is None:
            open_.remove(slot)
            continue
        ahead.async_runs.popleft()
        task = {**leased.task, "deadline": now_us + leased.timeout_s * 1_000_000,
                "seq": seq, "timeout_s": leased.timeout_s}
        slot.running[leased.lease.run_id] = InFlight(
            leased.lease, leased.task, leased.timeout_s, began=mono,
            deadline=mono + leased.timeout_s + KILL_AFTER_S, size=size, seq=seq,
            is_async=True)
        slot.async_bytes += size
        if len(slot.running) >= per_child:
            open_.remove(slot)
        batches.setdefault(slot, []).append(task)
    for slot, tasks in batches.items():
        try:
            slot.send_async(tasks)
        except OSError:
            pass  # the child died: the supervisor sees it, and its runs end crashed
