"""W2 through Django's task framework: 20,000 no-op ``@task`` calls enqueued one by one
with ``.enqueue()`` (scheduler_tasks.backend.SchedulerBackend), then drained by the same
daemons as bench/ours.py's W2 (``runworker --concurrency 2`` and a dispatcher), on the
same clock: from the worker's launch until every run succeeded (BENCHMARKS.md,
"django.tasks").

    .venv/bin/python bench/djtasks.py W2 [--n N] [--quick] [--enqueue-batch K]

Resources: PostgreSQL database ``bench_djtasks``, Redis db 6 under the key prefix
``benchdjt`` (bench/ours.py's reset deletes only that prefix's keys). The last stdout line
is the result, as bench/run.py's adapter contract says.
"""

import contextlib
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("BENCH_OURS_DB", "bench_djtasks")
os.environ.setdefault("BENCH_OURS_PREFIX", "benchdjt")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
import cputime  # noqa: E402
import ours  # noqa: E402


def enqueue(n: int, batch: int = 1) -> float:
    """Enqueue ``n`` no-op tasks one ``.enqueue()`` each, ``batch`` calls to a transaction
    (1: each call on its own, its own commit); returns seconds."""
    from bench_tasks import noop
    from django.db import transaction

    began = time.perf_counter()
    for start in range(0, n, batch):
        with transaction.atomic() if batch > 1 else contextlib.nullcontext():
            for i in range(start, min(n, start + batch)):
                noop.enqueue(i)
    elapsed = time.perf_counter() - began
    ours.analyze()
    return elapsed


def w2(args) -> None:
    """As bench/ours.py's w2, the load made by ``.enqueue()`` instead of create_jobs."""
    n = args.n or (2000 if args.quick else 20_000)
    ours.reset()
    daemons = ours.Daemons(args.log_dir)
    try:
        daemons.start("dispatcher", "rundispatcher")
        if not ours.wait_dispatcher_ready():
            raise SystemExit("W2: the dispatcher took no shard within 30 s")
        enqueue_s = enqueue(n, args.enqueue_batch)
        cpu_before = daemons.cpu()
        began = time.monotonic()
        daemons.start("worker", *ours.WORKER_ARGS)
        done = common.wait_until(lambda: ours.count_succeeded() >= n, args.timeout, 0.05)
        wall = time.monotonic() - began
        cpu_us = cputime.per_run_us(cpu_before, daemons.cpu(), n)
    finally:
        daemons.stop()
    if not done:
        common.emit_json({"workload": "W2", "failed": f"only {ours.count_succeeded()} of "
                          f"{n} succeeded within {args.timeout} s", "figure": None})
        return
    drain_s = float(ours.scalar("SELECT EXTRACT(EPOCH FROM max(finished_at) - "
                                "min(started_at)) FROM runs_run"))
    details = {"n": n, "wall_s": round(wall, 3), "enqueue_s": round(enqueue_s, 3),
               "enqueue_per_s": round(n / enqueue_s, 1), "drain_s": round(drain_s, 3),
               "drain_runs_per_s": round(n / drain_s, 1),
               "cpu_us_per_run": cpu_us, "load_1m": os.getloadavg()[0],
               "commands": daemons.describe(), "versions": ours.versions(),
               "setup": "django.tasks .enqueue() one by one, then the Redis broker and 2 "
                        "child processes of one runworker; the clock includes the "
                        "worker's start"}
    ours.emit_result("W2", round(n / wall, 1), "jobs/s", details)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--daemon":
        ours.main()
        return
    parser = common.base_parser("W2 through django.tasks (bench/djtasks.py).")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--enqueue-batch", type=int, default=1,
                        help="enqueue calls per transaction (default 1: each its own); "
                             "bench/djtasks_pairs.py uses more, its figure is the drain")
    args = parser.parse_args()
    args.log_dir = Path("/tmp/bench-djtasks-logs")
    args.log_dir.mkdir(parents=True, exist_ok=True)
    common.install_signal_handlers()
    ours._ensure_database()
    ours._setup_django()
    w2(args)


if __name__ == "__main__":
    main()
