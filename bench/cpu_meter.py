"""CPU seconds consumed by each kind of process, read from outside them (docs/capacity.md,
"How it is measured"): a Python daemon's process tree from /proc/<pid>/stat, the
PostgreSQL server's processes (the postmaster and every child, backends and background
workers alike) the same way, Redis from its own ``INFO cpu``, and the machine's idle share
from /proc/stat. CPU time, unlike wall time, does not grow when other work shares the
cores, which is why the capacity model is stated in it.

Linux only (/proc). Exited processes are not lost: a parent's ``cutime``/``cstime``
fields hold the CPU of the children it reaped (a replaced worker child, a closed
PostgreSQL connection's backend), so the sum over a live tree includes them.
"""

import os
import time
from dataclasses import dataclass, field

TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def proc_stat(pid) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (which may hold spaces), or
    None if it is gone: state is [0], ppid [1], pgrp [2], utime [11], stime [12], cutime
    [13], cstime [14]."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            raw = f.read()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2:].split()


def own_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` itself (all its threads)."""
    fields = proc_stat(pid)
    return (int(fields[11]) + int(fields[12])) * TICK_S if fields else 0.0


def reaped_cpu_s(pid: int) -> float:
    """CPU seconds of the children ``pid`` has reaped (cutime + cstime)."""
    fields = proc_stat(pid)
    return (int(fields[13]) + int(fields[14])) * TICK_S if fields else 0.0


def parent_of(pid: int) -> int:
    """The parent pid of ``pid`` (0 if it is gone)."""
    fields = proc_stat(pid)
    return int(fields[1]) if fields else 0


def children(pid: int) -> list[int]:
    """The live children of ``pid``, forked by any of its threads."""
    out = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(p) for p in f.read().split()]
        except OSError:
            continue
    return out


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid``."""
    out, todo = [], children(pid)
    while todo:
        child = todo.pop()
        out.append(child)
        todo += children(child)
    return out


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and everything below it, the exited included."""
    return sum(own_cpu_s(p) + reaped_cpu_s(p) for p in [pid, *descendants(pid)])


def split_cpu_s(pid: int) -> tuple[float, float]:
    """(``pid``'s own CPU seconds, its descendants' with the exited ones): a worker's
    parent (leases, acks, supervision) apart from its children (the handlers)."""
    below = reaped_cpu_s(pid) + sum(own_cpu_s(p) + reaped_cpu_s(p) for p in descendants(pid))
    return own_cpu_s(pid), below


def redis_cpu_s(client) -> float:
    """used_cpu_user + used_cpu_sys of the Redis server ``client`` talks to (a redis-py
    client), in seconds since it started."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def machine_idle() -> tuple[float, float]:
    """(idle + iowait, total) jiffies of every core since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    return values[3] + values[4], sum(values[:8])


@dataclass
class Reading:
    """Cumulative CPU seconds per meter at one moment, with the wall clock and the
    machine's idle counters."""

    at: float
    cpu: dict[str, float]
    idle: tuple[float, float]


@dataclass
class Meter:
    """Named CPU readers (name -> callable returning cumulative CPU seconds); ``read``
    takes a Reading, ``delta`` the CPU seconds, wall seconds and idle share between two."""

    readers: dict = field(default_factory=dict)

    def read(self) -> Reading:
        return Reading(time.monotonic(), {name: fn() for name, fn in self.readers.items()},
                       machine_idle())

    @staticmethod
    def delta(before: Reading, after: Reading) -> dict:
        """{"wall_s", "idle_share" (of every core, 0-1), "cpu_s": {name: seconds}}."""
        idle = after.idle[0] - before.idle[0]
        total = after.idle[1] - before.idle[1]
        return {"wall_s": after.at - before.at,
                "idle_share": idle / total if total else None,
                "cpu_s": {name: after.cpu[name] - before.cpu.get(name, 0.0)
                          for name in after.cpu}}
