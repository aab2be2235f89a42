"""Recycling a worker's children (Celery's ``worker_max_tasks_per_child`` and
``worker_max_memory_per_child``, gunicorn's ``max_requests``): a child that has executed
MAX_RUNS_PER_CHILD runs, or whose resident set has grown past MAX_MEMORY_PER_CHILD_MB,
is handed no more runs; the runs waiting in its pipe are taken back for the other
children, the one it is executing finishes (acked and fenced as always), the child exits
and a new one takes its place (docs/deploy.md, "Recycling worker children").

The resident set is the child's current one (``/proc/<pid>/statm``, as ``ps`` shows it,
not the peak of ``getrusage``'s ``ru_maxrss``: a child that freed its memory is not
replaced for what it once held), read by the worker after the child finished a run. It
counts the pages the child shares with the worker since the fork, so a cap sits above
what a child holds when it starts (docs/deploy.md).
"""

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from runs.daemons.counts import CountTable
from runs.models import ChildRecycleCount
from runs.worker.pool import Slot
from scheduler_core import conf

KIB_PER_MIB = 1024
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024 if hasattr(os, "sysconf") else 4

log = logging.getLogger("scheduler.worker")

_table = CountTable(ChildRecycleCount, ("reason",))


@dataclass(frozen=True)
class Limits:
    """When a child is replaced: after ``max_runs`` runs (0: never) or once its resident
    set reaches ``max_memory_mb`` MiB (0: never)."""

    max_runs: int = 0
    max_memory_mb: int = 0


def limits(max_runs: int | None = None, max_memory_mb: int | None = None) -> Limits:
    """The recycling limits of a worker: ``max_runs`` runs per child and ``max_memory_mb``
    MiB of resident memory (ints, 0: never), each None for the setting
    (MAX_RUNS_PER_CHILD, MAX_MEMORY_PER_CHILD_MB). Raises ValueError naming the value
    when one is negative, or when a memory cap is asked where no /proc can measure it
    (not Linux)."""
    named = {}
    for name, value, setting in (("max_runs_per_child", max_runs, "MAX_RUNS_PER_CHILD"),
                                 ("max_memory_per_child_mb", max_memory_mb,
                                  "MAX_MEMORY_PER_CHILD_MB")):
        if value is None:
            name, value = f"SCHEDULER {setting}", conf.get(setting)
        if value < 0:
            raise ValueError(f"{name} must be 0 (never) or more, not {value}")
        named[setting] = (name, value)
    name, max_memory_mb = named["MAX_MEMORY_PER_CHILD_MB"]
    if max_memory_mb and rss_kib(None) is None:
        raise ValueError(f"{name} needs /proc/<pid>/statm (Linux) to read a child's "
                         "resident memory; leave it 0 on this system")
    return Limits(named["MAX_RUNS_PER_CHILD"][1], max_memory_mb)


def rss_kib(pid: int | None) -> int | None:
    """The current resident set of process ``pid`` (None: this one) in KiB, from
    /proc/<pid>/statm; None when it cannot be read (the process is gone, or no /proc)."""
    try:
        fields = Path(f"/proc/{pid or 'self'}/statm").read_text().split()
    except OSError:
        return None
    return int(fields[1]) * PAGE_KIB


def count(reason: str) -> None:
    """Count one child replaced for ``reason`` ("runs" or "memory"), in memory until
    flush_counts adds it to the database."""
    _table.add(reason)


def flush_counts(using: str) -> None:
    """Add the recycles counted since the last flush to ChildRecycleCount (the counter
    ``scheduler_worker_child_recycles_total``) in one statement; when the database
    refuses, they are kept for the next flush and nothing is raised."""
    _table.flush(using)


class Recycler:
    """Which children to retire (recycle_children, from the supervisor once a round's
    messages are handled) and replacing them. Owns nothing but its ``limits`` (Limits);
    the state of each child's retirement is its Slot's. Runs taken back from a retiring
    child go to the front of ``ahead``."""

    def __init__(self, limits_: Limits, children, ahead, child_acks,
                 stopping: Callable[[], bool]):
        self.limits = limits_
        self.children = children
        self.ahead = ahead
        self.child_acks = child_acks
        self.stopping = stopping

    def recycle_children(self) -> None:
        """Retire the children past a limit, and replace those retired whose last run
        has ended."""
        limits_ = self.limits
        if not (limits_.max_runs or limits_.max_memory_mb) or self.stopping():
            return
        for slot in self.children.slots:
            if slot.retiring is None:
                self.check_limits(slot, limits_)
            if slot.retiring is not None and not slot.queued and not slot.running:
                self.replace_retired(slot)

    def check_limits(self, slot: Slot, limits_: Limits) -> None:
        """Retire ``slot``'s child if it has been given ``max_runs`` runs (Slot.full: the
        runs waiting in its pipe are within them, it runs them), or, having finished a
        run since its last reading, holds ``max_memory_mb`` MiB or more (the runs
        waiting in its pipe are taken back for the other children)."""
        if limits_.max_runs and slot.full:
            slot.retiring = "runs"
        elif limits_.max_memory_mb and slot.ran > slot.rss_read_at:
            slot.rss_read_at = slot.ran
            rss = rss_kib(slot.process.pid)
            if rss is None or rss < limits_.max_memory_mb * KIB_PER_MIB:
                return
            slot.retiring, slot.rss_kib = "memory", rss
            slot.allow(False)  # a run its child would continue itself would come after
            back = slot.take_back()
            if back:
                self.ahead.requeue(back)
                self.child_acks.allow()

    def replace_retired(self, slot: Slot) -> None:
        """``slot``'s retired child has no run left: let it exit and start another, with
        one line in the log saying why."""
        pid, ran, reason, rss = slot.process.pid, slot.ran, slot.retiring, slot.rss_kib
        code = slot.let_exit()
        self.children.restart(slot)
        if reason == "runs":
            why = f"after {ran} runs (max_runs_per_child={self.limits.max_runs})"
        else:
            why = (f"at {rss // KIB_PER_MIB} MiB resident after {ran} runs "
                   f"(max_memory_per_child={self.limits.max_memory_mb} MiB)")
        log.info("worker: child %s recycled %s%s; new child %s", pid, why,
                 "" if code == 0 else f", killed (exit code {code})", slot.process.pid)
        count(reason)
