"""The async rows of BENCHMARKS.md ("Async handlers"): W2 with an ``async def`` no-op and
W3 with a handler that stamps its start and awaits a 50 ms sleep, ours against
procrastinate's and pgqueuer's async tasks, in interleaved pairs (bench/pairs.py).

    BENCH_REDIS_PORT=6393 BENCH_PG_PORT=5443 .venv/bin/python bench/async_pairs.py \
        [--pairs 3] [--variants tuned] [--w3-duration 20] [--workloads W2,W3]

Every adapter runs with BENCH_ASYNC=1, which switches its tasks: ours
``bench.async_noop`` / ``bench.async_stamp`` (bench/ours.py), procrastinate ``anoop`` /
``astamp`` (bench/peers/procrastinate/tasks.py), pgqueuer ``noop`` (already async) /
``astamp`` (bench/peers/pgqueuer/app.py). Sizes, workers and variants are the main
tables' (bench/rows.py, BENCHMARKS.md "Rules"). Writes bench/results/async-pairs.json and
prints one line per row (bench/peer_rows.py).
"""

import os
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import peer_rows  # noqa: E402

PEERS = ["procrastinate", "pgqueuer"]


def main() -> None:
    args = peer_rows.arguments(__doc__, PEERS, "tuned", BENCH / "results" / "async-pairs.json")
    os.environ["BENCH_ASYNC"] = "1"
    peer_rows.run(args, "bench-async-", {})


if __name__ == "__main__":
    main()
