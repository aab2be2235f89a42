"""W2 and W3 of ours against a few peers outside the main tables (bench/async_pairs.py,
bench/db_broker_pairs.py): each peer row in interleaved pairs with ours (bench/pairs.py),
W2 a cell per row, W3 chained over the rows, one output line per row as it ends."""

import argparse
import json
import tempfile
from pathlib import Path

import pairs
import rows


def arguments(doc: str, peers: list[str], variants: str, out: Path) -> argparse.Namespace:
    """The scripts' common options: --pairs, --variants, --workloads, --only (peers),
    --w3-duration (seconds), --out (the json written)."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--variants", default=variants)
    parser.add_argument("--workloads", default="W2,W3")
    parser.add_argument("--only", default=",".join(peers))
    parser.add_argument("--w3-duration", type=float, default=20.0)
    parser.add_argument("--out", type=Path, default=out)
    return parser.parse_args()


def summary(cell: dict, system: str, workload: str, variant: str) -> dict:
    """One row of the output: the pair medians and ratio of ``cell`` (bench/pairs.py)."""
    row = pairs.aggregate(system, workload, cell, variant)
    return {k: row.get(k) for k in ("label", "variant", "figure", "ours", "ratio", "pairs",
                                     "load_1m", "n", "config", "failed", "unit")}


def run(args: argparse.Namespace, log_prefix: str, extra: dict) -> dict:
    """Every row of ``args`` (arguments()); writes ``args.out`` after each row and returns
    ``{"when", "cells", "rows", **extra}``. The caller sets the environment the adapters
    read (BENCH_ASYNC, BENCH_OURS_BROKER) before calling."""
    rows.FULL_ARGS["W3"] = ["--duration", str(args.w3_duration)]
    peers = args.only.split(",")
    notes: list[str] = []
    pythons = {s: pairs.python_of(s, notes) for s in ["ours", *peers]}
    variants = args.variants.split(",")
    results = {"when": pairs.stamp(), **extra, "cells": {}, "rows": []}
    log_dir = Path(tempfile.mkdtemp(prefix=log_prefix))
    workloads = args.workloads.split(",")

    def add(workload: str, system: str, variant: str, cell: dict) -> None:
        results["cells"][f"{workload} {system} {variant}"] = cell
        results["rows"].append({"workload": workload,
                                **summary(cell, system, workload, variant)})
        print(json.dumps(results["rows"][-1]), flush=True)
        args.out.write_text(json.dumps(results, indent=1, default=str))

    if "W2" in workloads:
        for system in peers:
            for variant in variants:
                add("W2", system, variant, pairs.run_cell(
                    system, variant, "W2", pythons, args.pairs, False, None, log_dir))
    if "W3" in workloads:
        keys = [(system, variant) for system in peers for variant in variants]
        cells = pairs.run_chain(keys, "W3", pythons, args.pairs, False, None, log_dir)
        for (system, variant), cell in cells.items():
            add("W3", system, variant, cell)
    return results
