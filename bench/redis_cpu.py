"""Redis CPU per lease and per ack of the Redis broker (docs/scaling.md, "One queue over
several masters"): push N runs of one queue, lease them all in batches as a worker's lease
does (lease.lua), then ack them all (forget.lua and unpark.lua), reading the server's
``INFO cpu`` (used_cpu_user + used_cpu_sys) and ``INFO commandstats`` (EVALSHA's usec:
time inside the scripts) before and after each phase, of every master on a Redis Cluster.
Prints µs of Redis CPU per run for each phase, the runs/s one Redis core serves at that
cost, and on a cluster each master's share and the busiest one's µs a run (``--spread``:
the queue spread over the masters, docs/isolation.md).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench .venv/bin/python \\
        bench/redis_cpu.py [--runs N] [--batch B] [--owners K] [--shards S] [--repeat R] \\
        [--url redis://host:port/db | --url redis+cluster://host:port/ [--spread]]

Without ``--url`` it starts a private redis-server (no persistence) on a free port and
stops it at the end, so other clients of a shared Redis do not count. The prefix's keys
are deleted before and after. The runs are only Redis entries, but a push reads whether
flow control is in use: DATABASE_URL must name a migrated database.
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from capacity_model import BUSY_TARGET  # noqa: E402

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_project.settings")
os.environ["SCHEDULER_OWNER_CONCURRENCY"] = "1000000"  # nothing parks
os.environ.setdefault("SCHEDULER_REDIS_PREFIX", "benchcpu")


def free_port() -> int:
    """A loopback TCP port free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_redis() -> tuple[subprocess.Popen, str, str]:
    """A private redis-server without persistence: (process, its URL, its folder)."""
    folder = tempfile.mkdtemp(prefix="redis-cpu-")
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", folder], stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, url, folder
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("redis-server did not start")


def reading(client) -> dict[str, tuple[float, float]]:
    """{server: (used CPU s, EVALSHA + EVAL s)} of the Redis ``client`` talks to, or of
    each master of a Redis Cluster."""
    servers = ({node.name: node.redis_connection for node in client.get_primaries()}
               if hasattr(client, "get_primaries") else {"redis": client})
    out = {}
    for name, server in servers.items():
        cpu = server.info("cpu")
        stats = server.info("commandstats")
        usec = sum(int(stats.get(f"cmdstat_{cmd}", {}).get("usec", 0))
                   for cmd in ("evalsha", "eval"))
        out[name] = (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]), usec / 1e6)
    return out


def delta(before: dict, after: dict) -> dict[str, tuple[float, float]]:
    """``after`` minus ``before``, per server (reading's form)."""
    return {name: (after[name][0] - before[name][0], after[name][1] - before[name][1])
            for name in after}


def one_pass(broker, runs: int, batch: int, owners: int, shards: int) -> dict:
    """Push ``runs``, lease them all, ack them all: {phase: {server: (CPU s, script
    s)}}."""
    from runs.types import RunRef

    broker.flush()
    due = datetime.now(UTC) - timedelta(seconds=1)
    refs = [RunRef(i, "default", i % shards, 5, due, (i % owners) + 1 if owners else None)
            for i in range(1, runs + 1)]
    client = broker.client
    out = {}
    before = reading(client)
    for start in range(0, runs, 1000):
        broker.push(refs[start:start + 1000])
    out["push"] = delta(before, reading(client))
    slots = []
    before = reading(client)
    while len(slots) < runs:
        got = broker._claim(["default"], batch)
        if not got:
            raise SystemExit(f"nothing leased with {runs - len(slots)} runs left")
        slots += got
    out["lease"] = delta(before, reading(client))
    before = reading(client)
    for start in range(0, runs, batch):
        broker._forget(slots[start:start + batch])
    out["ack"] = delta(before, reading(client))
    return out


def main() -> None:
    """Parse the options, run the passes, print each phase's median µs per run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=32, help="runs per lease and per ack")
    parser.add_argument("--owners", type=int, default=10, help="0: runs without owner")
    parser.add_argument("--shards", type=int, default=1, help="SCHEDULER_SHARDS")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--url", default="", help="an existing Redis or Redis Cluster "
                        "(redis+cluster://...; default: start a Redis)")
    parser.add_argument("--spread", action="store_true",
                        help="SCHEDULER_SPREAD_QUEUES=default (a cluster: each shard its slot)")
    options = parser.parse_args()
    os.environ["SCHEDULER_SHARDS"] = str(options.shards)
    if options.spread:
        os.environ["SCHEDULER_SPREAD_QUEUES"] = "default"
    server = folder = None
    if options.url:
        os.environ["REDIS_URL"] = options.url
    else:
        server, os.environ["REDIS_URL"], folder = start_redis()
    import django

    django.setup()
    from runs.brokers.redis import RedisBroker

    try:
        broker = RedisBroker()
        passes = [one_pass(broker, options.runs, options.batch, options.owners,
                           options.shards) for _ in range(options.repeat)]
        broker.flush()
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
            shutil.rmtree(folder, ignore_errors=True)
    report(passes, options)


def median(values: list[float]) -> float:
    """The middle of ``values`` (the upper one of an even count)."""
    return sorted(values)[len(values) // 2]


def report(passes: list[dict], options) -> None:
    """Print each phase's median µs of Redis CPU a run, summed over the servers, what one
    core serves at that cost, and on a cluster each master's share of lease and ack."""
    runs = options.runs
    print(f"{runs} runs, batch {options.batch}, {options.owners} owners, "
          f"{options.shards} shard(s){', spread' if options.spread else ''}, median of "
          f"{options.repeat}; Redis CPU µs per run (used_cpu; inside scripts):")
    per = {}
    for phase in ("push", "lease", "ack"):
        cpu = median([sum(c for c, _ in p[phase].values()) for p in passes]) * 1e6 / runs
        lua = median([sum(u for _, u in p[phase].values()) for p in passes]) * 1e6 / runs
        per[phase] = cpu
        print(f"  {phase:5} {cpu:6.2f} µs   ({lua:5.2f} µs in scripts)")
    total, push = per["lease"] + per["ack"], per["push"]
    print(f"  lease + ack {total:.2f} µs a run: one Redis core serves "
          f"{1e6 / total:,.0f} runs/s; with push, {1e6 / (total + push):,.0f} runs/s, "
          f"{BUSY_TARGET * 1e6 / (total + push):,.0f} at {BUSY_TARGET:.0%} busy: a queue "
          "past that needs SPREAD_QUEUES (capacity_model.queue_slots)")
    servers = sorted(passes[0]["lease"])
    if len(servers) > 1:
        work = {name: median([sum(p[phase][name][0] for phase in ("push", "lease", "ack"))
                              for p in passes]) for name in servers}
        shares = ", ".join(f"{name} {cpu / sum(work.values()):.0%}"
                           for name, cpu in work.items())
        busiest = max(work.values()) * 1e6 / runs
        print(f"  push + lease + ack CPU by master: {shares}; the busiest spends "
              f"{busiest:.2f} µs a run: the queue tops out near "
              f"{BUSY_TARGET * 1e6 / busiest:,.0f} runs/s at {BUSY_TARGET:.0%} busy")


if __name__ == "__main__":
    main()
