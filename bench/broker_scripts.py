"""Lease and ack throughput of the Redis broker's scripts alone (no database): push N runs
of one queue, then lease BATCH at a time and forget (ack) them, as a worker's lease and
ack do on Redis, and print runs/s. Compares a single Redis with a Redis Cluster
(docs/isolation.md, "Redis Cluster") and one commit with another.

    DJANGO_SETTINGS_MODULE=scheduler_project.settings REDIS_URL=redis://127.0.0.1:6379/6 \\
    SCHEDULER_REDIS_PREFIX=bench .venv/bin/python bench/broker_scripts.py [--runs N] \\
        [--batch B] [--owners K] [--repeat R]

``--owners K`` gives the runs K owners (each with the default owner limit, set high so
nothing parks); 0: no owner. The prefix's keys are deleted before and after.
"""

import argparse
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_project.settings")
os.environ.setdefault("SCHEDULER_OWNER_CONCURRENCY", "1000000")

import django  # noqa: E402

django.setup()

from runs.brokers.redis import RedisBroker  # noqa: E402
from runs.types import RunRef  # noqa: E402


def one_pass(broker: RedisBroker, runs: int, batch: int, owners: int) -> tuple[float, float]:
    """Push ``runs``, then lease and ack them all; returns (lease s, ack s)."""
    broker.flush()
    due = datetime.now(UTC) - timedelta(seconds=1)
    refs = [RunRef(i, "default", 0, 5, due, (i % owners) + 1 if owners else None)
            for i in range(1, runs + 1)]
    broker.push(refs)
    lease_s = ack_s = 0.0
    left = runs
    while left:
        t0 = time.perf_counter()
        slots = broker._claim(["default"], batch)
        t1 = time.perf_counter()
        broker._forget(slots)
        ack_s += time.perf_counter() - t1
        lease_s += t1 - t0
        if not slots:
            raise SystemExit(f"nothing leased with {left} runs left")
        left -= len(slots)
    return lease_s, ack_s


def main() -> None:
    """Parse the options, run the passes, print the best pass's runs/s."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--owners", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()
    broker = RedisBroker()
    results = [one_pass(broker, options.runs, options.batch, options.owners)
               for _ in range(options.repeat)]
    broker.flush()
    lease_s = min(r[0] for r in results)
    ack_s = min(r[1] for r in results)
    print(f"{broker.url}: {options.runs} runs, batch {options.batch}, {options.owners} owners,"
          f" best of {options.repeat}: lease {options.runs / lease_s:,.0f} runs/s,"
          f" ack {options.runs / ack_s:,.0f} runs/s,"
          f" lease+ack {options.runs / (lease_s + ack_s):,.0f} runs/s")


if __name__ == "__main__":
    main()
