"""CPU time of the processes a benchmark runs (daemons, PostgreSQL, Redis): on a machine
shared with others, the wall clock swings by 3x between runs while CPU seconds per run move
much less (BENCHMARKS.md, "django.tasks"). Linux only (/proc)."""

import os

import common
from cpu_meter import TICK_S, own_cpu_s, reaped_cpu_s
from cpu_meter import proc_stat as _stat


def process_cpu_s(pid, reaped: bool = False) -> float:
    """CPU seconds (user + system) of process ``pid`` so far, with ``reaped`` those of
    its children it has waited for; 0.0 once it is gone."""
    return own_cpu_s(pid) + (reaped_cpu_s(pid) if reaped else 0.0)


def group_cpu_s(pgid) -> dict[str, float]:
    """CPU seconds of process group ``pgid`` (a daemon started by spawn() and the
    children it forked): {"leader": its own, "children": its live children's plus those
    it reaped}."""
    leader, children = 0.0, 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat(entry)
        if fields is None or int(fields[2]) != pgid:
            continue
        own = (int(fields[11]) + int(fields[12])) * TICK_S
        if int(entry) == pgid:
            leader += own
            children += (int(fields[13]) + int(fields[14])) * TICK_S
        else:
            children += own
    return {"leader": leader, "children": children}


def server_tree_cpu_s(pid) -> float:
    """CPU seconds of a server process and all its children, live or reaped (PostgreSQL's
    postmaster and its backends)."""
    total = process_cpu_s(pid, reaped=True)
    for entry in os.listdir("/proc"):
        fields = _stat(entry) if entry.isdigit() else None
        if fields is not None and int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) * TICK_S
    return total


def redis_cpu_s(db=0) -> float:
    """CPU seconds (user + system) the Redis server has used (INFO cpu)."""
    r = common.Redis(db)
    try:
        info = r.execute("INFO", "cpu").decode()
    finally:
        r.close()
    values = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    return float(values["used_cpu_user"]) + float(values["used_cpu_sys"])


def postmaster_pid(connection) -> int:
    """The pid of the local PostgreSQL server a Django ``connection`` talks to: the parent
    of its backend."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    return int(_stat(backend)[1])


def snapshot(groups: dict[str, int], postmaster: int, redis_db: int) -> dict[str, float]:
    """CPU seconds so far of each process group in ``groups`` (name -> pgid; as
    ``name`` and ``name_children``), of the PostgreSQL server ``postmaster`` (its
    backends included) and of Redis."""
    out = {}
    for name, pgid in groups.items():
        cpu = group_cpu_s(pgid)
        out[name], out[f"{name}_children"] = cpu["leader"], cpu["children"]
    out["postgresql"] = server_tree_cpu_s(postmaster)
    out["redis"] = redis_cpu_s(redis_db)
    return out


def per_run_us(before: dict[str, float], after: dict[str, float], runs: int) -> dict:
    """CPU microseconds per run of each process between two snapshots (a name missing
    from ``before`` started in between: counted from 0), and their ``total``."""
    us = {name: round((value - before.get(name, 0.0)) * 1e6 / runs, 1)
          for name, value in after.items()}
    us["total"] = round(sum(us.values()), 1)
    return us
