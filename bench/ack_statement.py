"""The batched ack of successes alone (runs/execution/completion.py, ``_succeed_only_pg``):
milliseconds per batch, on the database of bench/ours.py (docs/performance.md, "The ack").

    .venv/bin/python bench/ack_statement.py [--batch 500] [--rounds 20] [--jobs 20000]

Stores ``jobs`` one-off no-op jobs with their runs (bench/ours.py's reset and create_jobs),
then, ``rounds`` times, in a transaction rolled back afterwards: marks ``batch`` of the runs
running under their attempt and times the one statement that acks them all. The first
rounds include the statement's planning (and, from the fifth on a direct session, its
preparing: scheduler_core/prepared.py); the median of the rounds after the fifth is the
figure. Prints one JSON line.
"""

import argparse
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
    args = parser.parse_args()
    common.compile_sources()
    ours._ensure_database()
    ours._setup_django()
    from django.db import transaction
    from django.utils import timezone

    from runs.execution import completion
    from runs.models import AttemptOutcome, Run, RunState
    from runs.types import Lease, Outcome

    ours.reset()
    ours.create_jobs(args.jobs, handler="noop", run_at=timezone.now())
    rows = list(Run.objects.order_by("id").values_list("id", "attempt"))
    spent = []
    for k in range(args.rounds):
        start = (k * args.batch) % max(len(rows) - args.batch, 1)
        batch = rows[start:start + args.batch]
        with transaction.atomic():
            Run.objects.filter(pk__in=[r[0] for r in batch]).update(
                state=RunState.RUNNING, lease_expires_at=timezone.now())
            outcomes = [Outcome(lease=Lease(run_id, attempt, "default", 0, None),
                                outcome=AttemptOutcome.SUCCEEDED) for run_id, attempt in batch]
            began = time.perf_counter()
            accepted, _, _ = completion._succeed_only_pg(outcomes, "default")
            spent.append(time.perf_counter() - began)
            if not all(accepted):
                raise SystemExit(f"round {k}: {accepted.count(False)} acks refused")
            transaction.set_rollback(True)
    common.emit_json({"batch": args.batch, "rounds": args.rounds,
                      "first_ms": [round(s * 1000, 2) for s in spent[:5]],
                      "median_ms_after_5": round(statistics.median(spent[5:]) * 1000, 2),
                      "us_per_run": round(statistics.median(spent[5:]) * 1e6 / args.batch, 1)})


if __name__ == "__main__":
    main()
