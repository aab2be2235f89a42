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
prints one line per row.
"""

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import pairs  # noqa: E402
import rows  # noqa: E402

PEERS = ["procrastinate", "pgqueuer"]


def summary(cell: dict, system: str, workload: str, variant: str) -> dict:
    row = pairs.aggregate(system, workload, cell, variant)
    return {k: row.get(k) for k in ("label", "variant", "figure", "ours", "ratio", "pairs",
                                     "load_1m", "n", "config", "failed", "unit")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--variants", default="tuned")
    parser.add_argument("--workloads", default="W2,W3")
    parser.add_argument("--w3-duration", type=float, default=20.0)
    parser.add_argument("--out", type=Path, default=BENCH / "results" / "async-pairs.json")
    args = parser.parse_args()
    os.environ["BENCH_ASYNC"] = "1"
    rows.FULL_ARGS["W3"] = ["--duration", str(args.w3_duration)]
    notes: list[str] = []
    pythons = {s: pairs.python_of(s, notes) for s in ["ours", *PEERS]}
    variants = args.variants.split(",")
    results = {"when": pairs.stamp(), "cells": {}, "rows": []}
    log_dir = Path(tempfile.mkdtemp(prefix="bench-async-"))
    workloads = args.workloads.split(",")
    if "W2" in workloads:
        for system in PEERS:
            for variant in variants:
                cell = pairs.run_cell(system, variant, "W2", pythons, args.pairs, False,
                                      None, log_dir)
                results["cells"][f"W2 {system} {variant}"] = cell
                results["rows"].append({"workload": "W2",
                                        **summary(cell, system, "W2", variant)})
                print(json.dumps(results["rows"][-1]), flush=True)
                args.out.write_text(json.dumps(results, indent=1, default=str))
    if "W3" in workloads:
        keys = [(system, variant) for system in PEERS for variant in variants]
        cells = pairs.run_chain(keys, "W3", pythons, args.pairs, False, None, log_dir)
        for (system, variant), cell in cells.items():
            results["cells"][f"W3 {system} {variant}"] = cell
            results["rows"].append({"workload": "W3",
                                    **summary(cell, system, "W3", variant)})
            print(json.dumps(results["rows"][-1]), flush=True)
    args.out.write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
