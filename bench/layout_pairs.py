"""What the partitioned history costs the hot path: bench/ours.py W2 (20,000 no-op jobs,
2 worker processes) on runs/attempts/log lines in daily time partitions (the default on
PostgreSQL) against the same code on plain tables (HISTORY_PARTITION_S=0 at migrate and in
every daemon), in interleaved pairs whose order alternates, so a machine loaded by others
weighs on both sides alike (BENCHMARKS.md, "Cron, isolation, history").

    .venv/bin/python bench/layout_pairs.py [--pairs 3] [--n 20000]

Each side has a database of its own (bench_layout_partitioned, bench_layout_plain, made and
migrated by bench/ours.py on first use) and a key prefix of its own. Run it on servers of
its own (BENCH_PG_PORT, BENCH_REDIS_PORT: bench/common.py). Prints one JSON line: per pair
the figure from the worker's launch, the drain (first lease to last ack) and the CPU
microseconds per run of every process (bench/cputime.py), then the plain/partitioned
ratios' median and range.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
SIDES = {
    "partitioned": {"BENCH_OURS_DB": "bench_layout_partitioned", "BENCH_OURS_PREFIX": "benchlp"},
    "plain": {"BENCH_OURS_DB": "bench_layout_plain", "BENCH_OURS_PREFIX": "benchlf",
              "HISTORY_PARTITION_S": "0"},
}


def run_one(side: str, n: int) -> dict:
    """One W2 drain of ``n`` runs on ``side``'s layout; the adapter's figures."""
    env = {**os.environ, **SIDES[side]}
    out = subprocess.run([sys.executable, str(BENCH / "ours.py"), "W2", "--n", str(n)],
                         capture_output=True, text=True, check=False, env=env)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    details = result.get("details", {})
    return {"side": side, "figure": result.get("figure"), "failed": result.get("failed"),
            "drain_runs_per_s": details.get("drain_runs_per_s"),
            "cpu_us_per_run": details.get("cpu_us_per_run"), "load_1m": details.get("load_1m")}


def _total_cpu(run: dict):
    cpu = run.get("cpu_us_per_run")
    return cpu.get("total") if isinstance(cpu, dict) else cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--n", type=int, default=20_000)
    args = parser.parse_args()
    pairs = []
    for index in range(args.pairs):
        order = ["partitioned", "plain"] if index % 2 == 0 else ["plain", "partitioned"]
        runs = {side: run_one(side, args.n) for side in order}
        pairs.append(runs)
        print(json.dumps(runs), file=sys.stderr, flush=True)
    ratios = {}
    for key, get in (("figure", lambda r: r["figure"]),
                     ("drain", lambda r: r["drain_runs_per_s"]),
                     ("cpu_per_run", _total_cpu)):
        values = [get(p["partitioned"]) / get(p["plain"]) for p in pairs
                  if get(p["partitioned"]) and get(p["plain"])]
        if values:
            ratios[key] = {"median": round(statistics.median(values), 3),
                           "min": round(min(values), 3), "max": round(max(values), 3)}
    print(json.dumps({"pairs": pairs, "partitioned_over_plain": ratios}))


if __name__ == "__main__":
    main()
