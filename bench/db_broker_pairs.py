"""The database broker's rows of BENCHMARKS.md ("Database broker"): W2 and W3 with ours on
PostgreSQL alone (``SCHEDULER_BROKER=database``, no REDIS_URL; idle workers woken by
LISTEN/NOTIFY, docs/performance.md) against the PostgreSQL-only peers that also wake by
LISTEN/NOTIFY, pgqueuer and procrastinate, in interleaved pairs (bench/pairs.py).

    BENCH_REDIS_PORT=6393 BENCH_PG_PORT=5443 .venv/bin/python bench/db_broker_pairs.py \
        [--pairs 3] [--variants default,tuned] [--w3-duration 20] [--workloads W2,W3]

Ours runs with BENCH_OURS_BROKER=database (bench/ours.py); everything else (sizes, the
2 worker processes, variants, each peer's options) is the main tables' (bench/rows.py,
BENCHMARKS.md "Rules"). Writes bench/results/db-broker-pairs.json and prints one line per
row (bench/peer_rows.py).
"""

import os
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import peer_rows  # noqa: E402

PEERS = ["pgqueuer", "procrastinate"]


def main() -> None:
    args = peer_rows.arguments(__doc__, PEERS, "default,tuned",
                               BENCH / "results" / "db-broker-pairs.json")
    # Read by our adapter's runs only; the peers read no such variable.
    os.environ["BENCH_OURS_BROKER"] = "database"
    peer_rows.run(args, "bench-dbbroker-", {"broker": "database"})


if __name__ == "__main__":
    main()
