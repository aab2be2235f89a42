"""Where a W1 batch's time goes: ``create_jobs`` of one-off jobs for an owner, the Redis
broker on PostgreSQL, split into its phases, with the CPU each process spends per job
(docs/performance.md, "Ingest: where a batch goes").

    .venv/bin/python bench/ingest_phases.py [--batch 10000] [--rounds 5] [--without-fks]
                                            [--pgqueuer [--write]]

Per round, from empty tables: wall and this process's CPU milliseconds of each phase
(validation; the database clock and the id ranges; the COPY of the jobs; the runs'
lines and their COPY; the commit, where PostgreSQL checks each new row's foreign keys;
the Redis push after it), and the CPU of the PostgreSQL backend (/proc/<pid>/stat) and
of Redis (INFO cpu) over the whole call. ``--without-fks`` drops the runs' foreign key to
the jobs and the jobs' to their owner first, in this script's own database: what those
checks cost, not a setting to deploy.

Prints one JSON line: the median of each figure over the rounds, CPU µs per job by
process, and the jobs per second two cores could reach at that CPU per job. With
``--pgqueuer`` the same for pgqueuer's bulk enqueue (``Queries.enqueue`` with lists of
1,000, as W1 times it: bench/peers/pgqueuer/bench.py) in its own virtualenv, a round
of it after each of ours. ``--write`` also saves the line, with the date and the
machine, to bench/results/ingest-phases.json, whence BENCHMARKS.md's W1 target line
gives W1's floor (bench/floors.py); bench/run.py's W1 stage runs it so. Servers:
BENCH_PG_PORT, BENCH_REDIS_PORT (bench/common.py); databases bench_ingest_phases and
bench_pgqueuer.
"""

import argparse
import collections
import json
import os
import statistics
import sys
import time
from datetime import UTC, date, datetime
from pathlib import Path

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(BENCH))
sys.path.insert(0, BENCH)

import common  # noqa: E402
import cpu_meter  # noqa: E402
import timed_parts  # noqa: E402

DBNAME = "bench_ingest_phases"
OUT = Path(BENCH) / "results" / "ingest-phases.json"
# (label, module, attribute path): each wrapped to add up its wall and CPU time. A phase
# includes the phases called inside it; "runs" includes its COPY.
PHASES = [
    ("validate", "jobs.services", "validate_specs"),
    ("clock and ids", "jobs.ingest.bulk", "next_ids"),
    ("jobs and runs COPY", "jobs.ingest.bulk", "copy_lines"),
    ("runs: lines, COPY, refs", "jobs.ingest.bulk", "_Rows._runs"),
    ("commit", "django.db.backends.base.base", "BaseDatabaseWrapper.commit"),
    ("Redis push", "runs.brokers.redis.broker", "RedisBroker.push"),
]
FOREIGN_KEYS = (("runs_run", "job_id", "jobs_job"), ("jobs_job", "owner_id", "auth_user"))


def _drop_foreign_keys(cursor) -> None:
    for table, column, target in FOREIGN_KEYS:
        cursor.execute(
            "SELECT conname FROM pg_constraint WHERE contype = 'f' AND conrelid = %s::regclass"
            " AND confrelid = %s::regclass AND conparentid = 0", [table, target])
        for (name,) in cursor.fetchall():
            cursor.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
        common.log(f"[phases] dropped {table}.{column}'s foreign key to {target}")


def measure(batch: int, rounds: int, without_fks: bool, between=None) -> dict:
    """Ours' phases and CPU per job over ``rounds`` batches (module docstring); calls
    ``between()`` after each round."""
    os.environ.update(common.OURS_ENV)
    os.environ.update(DJANGO_SETTINGS_MODULE="scheduler_project.settings",
                      DATABASE_URL=common.pg_url(DBNAME), REDIS_URL=common.redis_url(8),
                      SCHEDULER_REDIS_PREFIX="phases")
    common.pg_recreate_database(DBNAME)
    common.redis_flushdb(8)
    import django

    django.setup()
    import redis
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection

    from jobs import services

    call_command("migrate", verbosity=0)
    wall, cpu = collections.Counter(), collections.Counter()
    timed_parts.wrap(PHASES, cpu, wall)
    user = get_user_model().objects.create(username="bench")
    with connection.cursor() as cursor:
        if without_fks:
            _drop_foreign_keys(cursor)
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    client = redis.Redis(host=common.REDIS_HOST, port=common.REDIS_PORT)

    now = datetime.now(UTC)
    seen = collections.defaultdict(list)
    for _ in range(rounds):
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE jobs_job, runs_run CASCADE")
        common.redis_flushdb(8)
        specs = [{"handler": "noop", "payload": {"i": i}, "run_at": now} for i in range(batch)]
        wall.clear()
        cpu.clear()
        marks = (time.perf_counter(), time.process_time(), cpu_meter.own_cpu_s(backend),
                 cpu_meter.redis_cpu_s(client))
        services.create_jobs(specs, owner=user)
        ends = (time.perf_counter(), time.process_time(), cpu_meter.own_cpu_s(backend),
                cpu_meter.redis_cpu_s(client))
        spent = [end - mark for end, mark in zip(ends, marks, strict=True)]
        for key, value in zip(("wall", "client", "postgresql", "redis"), spent, strict=True):
            seen[key].append(value)
        for label, *_ in PHASES:
            seen[f"{label} wall"].append(wall[label])
            seen[f"{label} cpu"].append(cpu[label])
        if between is not None:
            between()
    med = {key: statistics.median(values) for key, values in seen.items()}
    per_job = {p: round(med[p] / batch * 1e6, 1) for p in ("client", "postgresql", "redis")}
    total = sum(per_job.values())
    return {
        "batch": batch, "rounds": rounds, "without_fks": without_fks,
        "load_1m": round(os.getloadavg()[0], 2),
        "jobs_per_s": round(batch / med["wall"]),
        "wall_ms": round(med["wall"] * 1000, 1),
        "phases_ms": {label: {"wall": round(med[f"{label} wall"] * 1000, 1),
                              "cpu": round(med[f"{label} cpu"] * 1000, 1)}
                      for label, *_ in PHASES},
        "cpu_us_per_job": {**per_job, "total": round(total, 1)},
        # Every process's CPU per job, on both cores at once: no batch size or overlap
        # stores jobs faster than this here.
        "two_core_ceiling_jobs_per_s": round(2e6 / total),
    }


# Run by pgqueuer's own interpreter: its W1 bulk enqueue of N jobs (argv[1]) on a fresh
# schema, then {"wall_s", "client_s", "postgresql_s"} of the enqueue alone.
PGQUEUER_ROUND = """
import asyncio, json, sys, time
n = int(sys.argv[1])
sys.argv = ["bench.py", "W1"]  # the adapter parses its own arguments
import bench as adapter
from cpu_meter import own_cpu_s

async def main(n):
    conn = await adapter.asyncpg.connect()
    backend = await conn.fetchval("SELECT pg_backend_pid()")
    queries = adapter.Queries(adapter.AsyncpgDriver(conn))
    marks = (time.perf_counter(), time.process_time(), own_cpu_s(backend))
    for start in range(0, n, adapter.BATCH):
        k = min(adapter.BATCH, n - start)
        await queries.enqueue(["noop"] * k, [None] * k, [0] * k)
    ends = (time.perf_counter(), time.process_time(), own_cpu_s(backend))
    await conn.close()
    return dict(zip(("wall_s", "client_s", "postgresql_s"),
                    (b - a for a, b in zip(marks, ends))))

adapter.reset("tuned")
print(json.dumps(asyncio.run(main(n))))
"""


class Pgqueuer:
    """pgqueuer's bulk enqueue of ``batch`` jobs, a round per call; ``summary`` gives the
    medians as measure() gives ours (CPU µs per job of the client and its backend)."""

    def __init__(self, batch: int):
        import harness

        self.batch, self.seen = batch, collections.defaultdict(list)
        self.python = harness.ensure_venv("pgqueuer", [])
        self.here = os.path.join(BENCH, "peers", "pgqueuer")

    def __call__(self) -> None:
        import subprocess

        done = subprocess.run(
            [str(self.python), "-c", PGQUEUER_ROUND, str(self.batch)],
            capture_output=True, text=True, cwd=self.here, check=True,
            env={**os.environ, "PYTHONPATH": f"{self.here}:{BENCH}"})
        for key, value in json.loads(done.stdout.strip().splitlines()[-1]).items():
            self.seen[key].append(value)

    def summary(self) -> dict:
        med = {key: statistics.median(values) for key, values in self.seen.items()}
        per_job = {"client": round(med["client_s"] / self.batch * 1e6, 1),
                   "postgresql": round(med["postgresql_s"] / self.batch * 1e6, 1)}
        total = sum(per_job.values())
        return {"jobs_per_s": round(self.batch / med["wall_s"]),
                "cpu_us_per_job": {**per_job, "total": round(total, 1)},
                "two_core_ceiling_jobs_per_s": round(2e6 / total)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--without-fks", action="store_true",
                        help="drop the runs' and the jobs' foreign keys first (what they cost)")
    parser.add_argument("--pgqueuer", action="store_true",
                        help="pgqueuer's bulk enqueue too, measured alike")
    parser.add_argument("--write", action="store_true",
                        help="save the result to bench/results/ingest-phases.json")
    args = parser.parse_args()
    if args.write and (not args.pgqueuer or args.without_fks):
        parser.error("--write saves W1's floor: it needs --pgqueuer and not --without-fks")
    peer = Pgqueuer(args.batch) if args.pgqueuer else None
    out = measure(args.batch, args.rounds, args.without_fks, between=peer)
    if peer is not None:
        out["pgqueuer"] = peer.summary()
    if args.write:
        OUT.write_text(json.dumps({"date": date.today().isoformat(),
                                   "hardware": common.hardware(), **out}, indent=1) + "\n")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
