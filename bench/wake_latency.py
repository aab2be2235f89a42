"""How late an idle worker starts a run: one due now (woken by the push's wake token
on Redis, by LISTEN/NOTIFY on the database broker) and one delayed by a fraction of a
second (on Redis slept to by the worker itself, not in a BLPOP whose timeout Redis checks
only at its 100 ms ticks, runs/brokers/redis/wake.py; on the database broker woken by the
dispatcher's promote, runs/brokers/pg_listen.py). BENCHMARKS.md, "Waking idle workers";
docs/performance.md, "Waking idle workers on the database broker".

    BENCH_PG_PORT=5461 BENCH_REDIS_PORT=6461 .venv/bin/python bench/wake_latency.py [--n 20]
    BENCH_PG_PORT=5461 .venv/bin/python bench/wake_latency.py --broker database [--poll 1]

One ``runworker --concurrency 1`` and one ``rundispatcher``, WORKER_POLL_S at its default
(0.05 s) unless ``--poll`` (seconds) says, database ``bench_wake`` (``bench_wake_db`` for
the database broker) on that PostgreSQL (created and migrated), Redis db 9 under the key
prefix ``wake``. For each delay in turn, ``--n`` one-off ``noop`` jobs one at a time,
0.37 s apart (the worker idle in between); the lateness of each is its first attempt's
``started_at`` (the lease) minus the run's ``scheduled_at``, both on the database clock.
Prints one JSON line per delay: median, p90 and max in ms.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DELAYS_S = (0.0, 0.3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--broker", choices=("redis", "database"), default="redis")
    parser.add_argument("--poll", type=float, default=None,
                        help="the worker's WORKER_POLL_S, seconds (default: its default)")
    args = parser.parse_args()
    pg, rd = os.environ.get("BENCH_PG_PORT", "5432"), os.environ.get("BENCH_REDIS_PORT", "6379")
    db = "bench_wake" if args.broker == "redis" else "bench_wake_db"
    os.environ.update(
        DATABASE_URL=f"postgres://postgres@127.0.0.1:{pg}/{db}",
        SCHEDULER_BROKER=args.broker, SCHEDULER_REDIS_PREFIX="wake",
        SECRET_KEY="bench-" + "x" * 50, DEBUG="false", SCHEDULER_DEMO_HANDLERS="true",
        DJANGO_SETTINGS_MODULE="scheduler_project.settings")
    if args.broker == "redis":
        os.environ["REDIS_URL"] = f"redis://127.0.0.1:{rd}/9"
    else:
        os.environ.pop("REDIS_URL", None)
    if args.poll is not None:
        os.environ["SCHEDULER_WORKER_POLL_S"] = str(args.poll)
    subprocess.run(["createdb", "-h", "127.0.0.1", "-p", pg, "-U", "postgres", db],
                   stderr=subprocess.DEVNULL, check=False)
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "-v0"], check=True, cwd=ROOT)
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from jobs.services import create_job
    from runs.models import Attempt

    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "cwd": ROOT}
    daemons = [subprocess.Popen([*manage, "runworker", "--concurrency", "1"], **quiet),
               subprocess.Popen([*manage, "rundispatcher"], **quiet)]
    limit_s = 5 + 2 * (args.poll or 0)
    try:
        time.sleep(4)  # both serving
        for delay in DELAYS_S:
            late = []
            for _ in range(args.n):
                run = create_job("noop", delay_s=delay or None).runs.get()
                attempt = None
                for _ in range(int(100 * limit_s)):
                    if attempt := Attempt.objects.filter(run_id=run.pk).first():
                        break
                    time.sleep(0.01)
                if attempt is None:
                    raise SystemExit(f"run {run.pk} did not start within {limit_s} s")
                late.append((attempt.started_at - run.scheduled_at).total_seconds() * 1000)
                time.sleep(0.37)
            in_order = list(late)
            late.sort()
            print(json.dumps({"broker": args.broker, "poll_s": args.poll, "delay_s": delay,
                              "n": len(late),
                              "median_ms": round(statistics.median(late), 1),
                              "p90_ms": round(late[int(0.9 * (len(late) - 1))], 1),
                              "max_ms": round(late[-1], 1),
                              "in_order_ms": [round(x) for x in in_order]}), flush=True)
    finally:
        for daemon in daemons:
            daemon.terminate()
        for daemon in daemons:
            daemon.wait()


if __name__ == "__main__":
    main()
