"""How fast the history is pruned (runs/history/retention.py, docs/retention.md).

    .venv/bin/python bench/prune.py [--n N] [--attempts A] [--lines L] [--batch B]

Setup (not timed), in bench/ours.py's database (bench_ours, emptied first): N one-off
noop jobs and their runs through ``jobs.services.create_jobs``, then, by SQL, every run
``succeeded`` 8 days ago with A attempts and L log lines per attempt, and ANALYZE. Timed:
``retention.prune`` in batches of B until none are left (what ``manage.py prunehistory``
does), and a batch of runs.daemons.dispatcher.PRUNE_BATCH (a dispatcher's round; median of 5).
Prints one JSON line: runs/s deleted, with the rows deleted per table.
"""

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import ours  # noqa: E402  (sets the bench environment: bench_ours)


def load_history(n: int, attempts: int, lines: int) -> None:
    """N finished runs with their attempts and log lines, 8 days old."""
    from django.db import connection

    ours.create_jobs(n, handler="noop", run_at=datetime.now(UTC))
    with connection.cursor() as cursor:
        cursor.execute("UPDATE runs_run SET state = 'succeeded', attempt = %s, "
                       "finished_at = now() - interval '8 days'", [attempts])
        cursor.execute(
            "INSERT INTO runs_attempt (run_id, number, worker_id, started_at, finished_at, "
            "outcome, error, run_scheduled_at) SELECT r.id, g, 'w', r.finished_at, "
            "r.finished_at, 'succeeded', '', r.scheduled_at "
            "FROM runs_run r, generate_series(1, %s) g", [attempts])
        cursor.execute(
            "INSERT INTO runs_logline (attempt_id, created_at, level, logger, message, "
            "run_scheduled_at) SELECT a.id, a.started_at, 20, 'bench', 'line ' || g, "
            "a.run_scheduled_at FROM runs_attempt a, generate_series(1, %s) g", [lines])
        cursor.execute("ANALYZE runs_run; ANALYZE runs_attempt; ANALYZE runs_logline; "
                       "ANALYZE jobs_job")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--attempts", type=int, default=1)
    parser.add_argument("--lines", type=int, default=2)
    parser.add_argument("--batch", type=int, default=5000)
    args = parser.parse_args()
    ours._ensure_database()
    ours._setup_django()
    from runs.daemons.dispatcher import PRUNE_BATCH
    from runs.history import retention

    ours.reset()
    load_history(PRUNE_BATCH * 5, args.attempts, args.lines)
    rounds = []
    for _ in range(5):
        began = time.perf_counter()
        one = retention.prune(retention.cutoff(7 * 86_400), PRUNE_BATCH)
        rounds.append(time.perf_counter() - began)

    ours.reset()
    load_history(args.n, args.attempts, args.lines)
    total = retention.Pruned()
    began = time.perf_counter()
    while True:
        pruned = retention.prune(retention.cutoff(7 * 86_400), args.batch)
        total.add(pruned)
        if pruned.runs < args.batch:
            break
    wall = time.perf_counter() - began
    print(json.dumps({
        "workload": "prune", "figure": round(total.runs / wall), "unit": "runs/s",
        "details": {"n": args.n, "batch": args.batch, "wall_s": round(wall, 2),
                    "runs": total.runs, "attempts": total.attempts,
                    "log_lines": total.log_lines, "jobs": total.jobs,
                    "dispatcher_batch_s": round(sorted(rounds)[2], 3),
                    "dispatcher_batch_runs": one.runs, "versions": ours.versions()},
    }), flush=True)


if __name__ == "__main__":
    main()
