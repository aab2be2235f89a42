"""pgqueuer adapter of the benchmark (the adapter contract is in bench/run.py's docstring).

Run with the peer's own virtualenv:
    bench/.venvs/pgqueuer/bin/python bench/peers/pgqueuer/bench.py W2 [--variant V] [--quick]

Setup per pgqueuer's docs: PostgreSQL only, database bench_pgqueuer (dropped and created per
run), schema by ``pgq install`` (durability ``durable``, the default: every table logged,
https://pgqueuer.readthedocs.io/en/latest/guides/performance-tuning.html, "Durability vs.
Throughput"); workers ``pgq run app:main`` (bench/peers/pgqueuer/app.py), two processes
(BENCHMARKS.md, "Rules"). default: ``--batch-size 10`` (the default), no
``--max-concurrent-tasks`` cap. tuned: the Performance Tuning page's advice for jobs under
1 s: ``--batch-size 100`` (jobs per dequeue round trip; the completion log buffer has the
same size), ``--max-concurrent-tasks 1000`` (at least twice the batch, as it requires) and
its checklist's ``pgq autovac`` on the queue tables. Enqueue through ``Queries.enqueue``
with lists (its bulk form, 1,000 jobs per call; W1 also times one call per job). A finished
job is deleted from ``pgqueuer`` and written to ``pgqueuer_log`` in the same statement
(durable history of outcomes). Prints one JSON line last.
"""

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from importlib.metadata import version
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))  # bench/ for common
sys.path.insert(0, str(HERE))

import common  # noqa: E402

DBNAME = "bench_pgqueuer"
os.environ.update(PGHOST=common.PG_HOST, PGPORT=str(common.PG_PORT), PGUSER=common.PG_USER,
                  PGDATABASE=DBNAME)
os.environ.setdefault("BENCH_STARTS_FILE", os.devnull)

import asyncpg  # noqa: E402
from pgqueuer.db import AsyncpgDriver  # noqa: E402
from pgqueuer.queries import Queries  # noqa: E402

PGQ = str(Path(sys.executable).parent / "pgq")
WORKER = [PGQ, "run", "app:main"]
VARIANTS = {"default": [], "tuned": ["--batch-size", "100", "--max-concurrent-tasks", "1000"]}
CONFIG = {
    "default": "2 x pgq run app:main (batch size 10), pgq install (durable)",
    "tuned": "2 x pgq run app:main --batch-size 100 --max-concurrent-tasks 1000, pgq "
             "install (durable) + pgq autovac",
}
HISTORY = ("durable: every finished job is a pgqueuer_log row (logged table, written in "
           "the statement that deletes the job), in PostgreSQL")
BATCH = 1000


def query(sql: str):
    """One value from bench_pgqueuer."""
    return common.pg_exec_sql(DBNAME, sql)


def reset(variant: str) -> None:
    """Fresh database and schema (``pgq install``; tuned: then ``pgq autovac``)."""
    common.pg_recreate_database(DBNAME)
    subprocess.run([PGQ, "install"], check=True, capture_output=True, timeout=120)
    if variant == "tuned":
        subprocess.run([PGQ, "autovac"], check=True, capture_output=True, timeout=120)


async def enqueue(n: int, bulk: bool, entrypoint: str = "noop") -> float:
    """Enqueue ``n`` jobs (lists of BATCH per call when ``bulk``); returns seconds."""
    conn = await asyncpg.connect()
    queries = Queries(AsyncpgDriver(conn))
    began = time.perf_counter()
    if bulk:
        for start in range(0, n, BATCH):
            k = min(BATCH, n - start)
            await queries.enqueue([entrypoint] * k, [None] * k, [0] * k)
    else:
        for _ in range(n):
            await queries.enqueue(entrypoint, None)
    elapsed = time.perf_counter() - began
    await conn.close()
    return elapsed


def start_workers(variant: str, logdir: Path, **env) -> list:
    """The row's two worker processes."""
    full = dict(os.environ, PYTHONPATH=str(HERE), **{k: str(v) for k, v in env.items()})
    return [common.spawn(WORKER + VARIANTS[variant], env=full, cwd=HERE,
                         log_path=logdir / f"worker{i}.log") for i in range(2)]


def facts(variant: str) -> dict:
    return {**common.row_facts(variant, CONFIG[variant], True, HISTORY),
            "worker_cmd": " ".join(["pgq", *WORKER[1:], *VARIANTS[variant]]) + " (x2)",
            "versions": {"pgqueuer": version("pgqueuer"), "asyncpg": version("asyncpg")},
            "hardware": common.hardware()}


def w1(args, logdir: Path) -> dict:
    """One ``enqueue`` call per job, then lists of 1,000 per call."""
    n = common.default_n(args)
    reset(args.variant)
    single = n / asyncio.run(enqueue(n, False))
    reset(args.variant)
    bulk = n / asyncio.run(enqueue(n, True))
    stored = int(query("SELECT count(*) FROM pgqueuer"))
    return {"workload": "W1", "figure": round(max(single, bulk), 1), "unit": "jobs/s",
            "details": {"n": n, "single_jobs_per_s": round(single, 1),
                        "bulk_jobs_per_s": round(bulk, 1), "stored_after_bulk": stored,
                        "bulk_api": f"Queries.enqueue(lists), {BATCH} jobs per call",
                        **facts(args.variant)}}


def w2(args, logdir: Path) -> dict:
    """N jobs enqueued (untimed), then the two workers until the queue table is empty."""
    n = common.default_n(args)
    reset(args.variant)
    asyncio.run(enqueue(n, True))
    query("ANALYZE")
    procs = []
    try:
        began = time.monotonic()
        procs = start_workers(args.variant, logdir)
        done = common.wait_until(lambda: int(query("SELECT count(*) FROM pgqueuer")) == 0,
                                 900, 0.05)
        wall = time.monotonic() - began
    finally:
        for proc in procs:
            common.stop(proc)
    logged = int(query("SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"))
    details = {"n": n, "seconds": round(wall, 3), "successful_in_log": logged,
               "completion": "pgqueuer table empty (a job leaves it when its outcome is "
                             "logged)", **facts(args.variant)}
    if not done or logged < n:
        return {"workload": "W2", "figure": None, "details": details,
                "failed": f"{logged} of {n} logged successful after {wall:.0f} s"}
    return {"workload": "W2", "figure": round(n / wall, 1), "unit": "jobs/s",
            "details": details}


def w3(args, logdir: Path) -> dict:
    """rate jobs/s for duration s, each with execute_after 2 s; lag = start - due."""
    duration = common.default_duration(args)
    rate, delay = args.rate, 2.0
    total = int(rate * duration)
    reset(args.variant)
    starts = logdir / "starts.txt"
    procs = start_workers(args.variant, logdir, BENCH_STARTS_FILE=starts)
    scheduled = {}

    async def submit():
        conn = await asyncpg.connect()
        queries = Queries(AsyncpgDriver(conn))
        t0 = time.time()
        for i in range(total):
            pause = t0 + i / rate - time.time()
            if pause > 0:
                await asyncio.sleep(pause)
            scheduled[str(i)] = time.time() + delay
            await queries.enqueue("astamp" if os.environ.get("BENCH_ASYNC") else "stamp",
                                  str(i).encode(),
                                  execute_after=timedelta(seconds=delay))
        await conn.close()

    try:
        time.sleep(2.0)  # the workers connect and LISTEN
        asyncio.run(submit())
        common.wait_until(lambda: len(common.read_starts(starts)) >= total, delay + 90, 0.25)
    finally:
        for proc in procs:
            common.stop(proc)
    seen = common.read_starts(starts)
    lags = [(seen[k] - at) * 1000 for k, at in scheduled.items() if k in seen]
    p99 = common.percentile(lags, 99)
    return {"workload": "W3", "figure": round(p99, 1) if p99 is not None else None,
            "unit": "ms", "details": {
                "rate_per_s": rate, "duration_s": duration, "count": len(lags),
                "missing": total - len(lags), "p50_ms": common.percentile(lags, 50),
                "p99_ms": p99, "api": "Queries.enqueue(execute_after=2 s); a worker "
                "re-polls after --dequeue-timeout (30 s) when no NOTIFY arrives",
                **facts(args.variant)}}


def unsupported(reason: str):
    return lambda args, logdir: {"workload": args.workload, "unsupported": reason}


WORKLOADS = {
    "W1": w1, "W2": w2, "W3": w3,
    "W4": unsupported("pgqueuer's schedules are declared in code, one per (entrypoint, "
                      "cron expression) by @pgq.schedule: not N schedules of one job"),
    "W5": unsupported("measured for ours and the cron peers only"),
    "W6": unsupported("pgqueuer keeps pending jobs in PostgreSQL only (no Redis)"),
}


def main() -> None:
    args = common.base_parser(__doc__.split("\n")[0]).parse_args()
    common.install_signal_handlers()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-pgqueuer-") as logdir:
            result = WORKLOADS[args.workload](args, Path(logdir))
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        result = {"workload": args.workload, "figure": None, "failed": repr(exc)}
    finally:
        common.kill_all()
    common.emit_json(result)


if __name__ == "__main__":
    main()
