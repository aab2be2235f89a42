"""The batched ack of successes alone (runs/execution/completion.py, ``_succeed_only_pg``):
milliseconds per batch, on the database of bench/ours.py (docs/performance.md, "The ack").

    .venv/bin/python bench/ack_statement.py [--batch 500] [--rounds 20] [--jobs 20000]
        [--history-days 7 --history-runs 300000] [--lease [--against REV]]

Stores ``jobs`` one-off no-op jobs with their runs (bench/ours.py's reset and create_jobs),
then, ``rounds`` times, in a transaction rolled back afterwards: marks ``batch`` of the runs
running under their attempt and times the one statement that acks them all. The first
rounds include the statement's planning (and, from the fifth on a direct session, its
preparing: scheduler_core/prepared.py); the median of the rounds after the fifth is the
figure. Prints one JSON line.

Each round times the ack twice, in alternating order: ``keyed``, the leases carrying their
runs' ``scheduled_at`` as a worker's do, and ``bare``, without it. With
``--history-days N`` the runs table first gets N daily partitions before today's, each
holding ``--history-runs`` finished runs and their attempts, as a week of history at the
default retention (HISTORY_RETENTION_S) holds: the bare ack looks each run up in every
partition (docs/performance.md, "Partitions and the ack"). Those partitions are dropped
at the end.

With ``--lease`` each round times the lease of the batch instead (``start_attempts``, the
Redis broker's database half: its runs queued first): ``lease``. With ``--against REV``
also ``REV``'s runs/execution/leases.py (read with ``git show``, loaded beside this
checkout's other modules), in alternating order within each round.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import common  # noqa: E402
import ours  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--history-days", type=int, default=0)
    parser.add_argument("--history-runs", type=int, default=300_000)
    parser.add_argument("--lease", action="store_true",
                        help="time the lease of each batch instead of its ack")
    parser.add_argument("--against", help="with --lease: also time this commit's lease")
    args = parser.parse_args()
    common.compile_sources()
    ours._ensure_database()
    ours._setup_django()
    from django.db import transaction
    from django.utils import timezone

    from runs.execution import completion, leases
    from runs.models import AttemptOutcome, Run, RunState
    from runs.types import Lease, Outcome

    ours.reset()
    ours.create_jobs(args.jobs, handler="noop", run_at=timezone.now())
    made = history(args.history_days, args.history_runs)
    rows = list(Run.objects.filter(pk__lte=args.jobs).order_by("id")
                .values_list("id", "attempt", "scheduled_at"))
    forms = {"lease": leases, **({args.against: module_at(args.against, "runs/execution/leases.py")}
                                 if args.lease and args.against else {})}
    spent = {form: [] for form in forms} if args.lease else {"keyed": [], "bare": []}
    try:
        for k in range(args.rounds):
            start = (k * args.batch) % max(len(rows) - args.batch, 1)
            batch = rows[start:start + args.batch]
            for form in (sorted(forms, reverse=k % 2 == 1) if args.lease else []):
                with transaction.atomic():
                    Run.objects.filter(pk__in=[r[0] for r in batch]).update(
                        state=RunState.QUEUED)
                    began = time.perf_counter()
                    taken = forms[form].start_attempts([r[0] for r in batch], "bench", 60,
                                                       "default")
                    spent[form].append(time.perf_counter() - began)
                    if len(taken) != len(batch):
                        raise SystemExit(f"round {k}: {len(batch) - len(taken)} not leased")
                    transaction.set_rollback(True)
            if args.lease:
                continue
            for form in ("keyed", "bare") if k % 2 else ("bare", "keyed"):
                with transaction.atomic():
                    Run.objects.filter(pk__in=[r[0] for r in batch]).update(
                        state=RunState.RUNNING, lease_expires_at=timezone.now())
                    outcomes = [Outcome(lease=Lease(
                        run_id, attempt, "default", 0, None,
                        task={"scheduled_at_us": round(at.timestamp() * 1e6)}
                        if form == "keyed" else None), outcome=AttemptOutcome.SUCCEEDED)
                        for run_id, attempt, at in batch]
                    began = time.perf_counter()
                    accepted, _, _ = completion._succeed_only_pg(outcomes, "default")
                    spent[form].append(time.perf_counter() - began)
                    if not all(accepted):
                        raise SystemExit(f"round {k} ({form}): {accepted.count(False)} "
                                         "acks refused")
                    transaction.set_rollback(True)
    finally:
        drop(made)
    common.emit_json({"batch": args.batch, "rounds": args.rounds,
                      "history_days": args.history_days,
                      "history_runs": args.history_runs if args.history_days else 0,
                      **{form: {"first_ms": [round(s * 1000, 2) for s in times[:5]],
                                "median_ms_after_5": round(statistics.median(times[5:]) * 1000,
                                                           2),
                                "us_per_run": round(statistics.median(times[5:]) * 1e6
                                                    / args.batch, 1)}
                         for form, times in spent.items()}})


def module_at(rev: str, path: str):
    """The module at ``path`` as commit ``rev`` has it, loaded under a name of its own (its
    imports are this checkout's modules)."""
    import importlib.util
    import subprocess
    import tempfile

    text = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=BENCH.parent, check=True,
                          capture_output=True, text=True).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as out:
        out.write(text)
    spec = importlib.util.spec_from_file_location(f"at_{rev}", out.name)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    finally:
        os.unlink(out.name)
    return module


def history(days: int, runs: int) -> list[str]:
    """Add ``days`` daily partitions before today's to the history tables, each with
    ``runs`` succeeded runs (of the first job) and their attempts; returns the partitions'
    suffixes."""
    from datetime import timedelta

    from django.db import connection, transaction

    from runs.history import time_partitions as tp

    if days < 1:
        return []
    with connection.cursor() as cursor:
        cursor.execute("SELECT date_trunc('day', clock_timestamp() AT TIME ZONE 'UTC') "
                       "AT TIME ZONE 'UTC', (SELECT min(id) FROM jobs_job)")
        today, job = cursor.fetchone()
        present = {r.lower for r in tp.ranges(cursor)}
    made = []
    for k in range(days, 0, -1):
        bounds = tp.Range(today - timedelta(days=k), today - timedelta(days=k - 1))
        if bounds.lower in present:
            continue
        with transaction.atomic(), connection.cursor() as cursor:
            tp.create_range(cursor, bounds)
            made.append(bounds.suffix)
            # Ids far past the bench's own; one run per millisecond of the day.
            cursor.execute(
                "INSERT INTO runs_run (id, job_id, scheduled_at, run_at, jitter_s, state, "
                "queue, shard, priority, attempt, max_attempts, worker_id, created_at, "
                "started_at, finished_at, error, catch_up, trace_context) "
                "SELECT %s + g, %s, t, t, 0, 'succeeded', 'default', 0, 5, 1, 3, '', t, t, t, "
                "'', false, '' FROM generate_series(1, %s) g, "
                "LATERAL (SELECT %s::timestamptz + g * interval '1 ms' AS t) x",
                [10**9 * (k + 1), job, runs, bounds.lower])
            cursor.execute(
                "INSERT INTO runs_attempt (run_id, run_scheduled_at, number, worker_id, "
                "started_at, finished_at, outcome, error) SELECT id, scheduled_at, 1, '', "
                f"started_at, finished_at, 'succeeded', '' FROM runs_run_{bounds.suffix}")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runs_run")
        cursor.execute("ANALYZE runs_attempt")
    return made


def drop(suffixes: list[str]) -> None:
    from django.db import connection

    from runs.history.time_partitions import TABLES

    with connection.cursor() as cursor:
        for suffix in suffixes:
            for table, _ in reversed(TABLES):
                cursor.execute(f"DROP TABLE IF EXISTS {table}_{suffix}")


if __name__ == "__main__":
    main()
