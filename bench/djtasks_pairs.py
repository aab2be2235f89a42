"""What the django.tasks layer costs against this project's own W2, in interleaved pairs
(BENCHMARKS.md, "django.tasks"): each pair runs bench/ours.py W2 (20,000 no-op jobs by
create_jobs) and bench/djtasks.py W2 (20,000 no-op tasks by ``.enqueue()``, 500 to a
transaction), the order
alternating from pair to pair, so a machine loaded by others weighs on both sides alike.
Per run it keeps the figure from the worker's launch, the drain (first lease to last
ack), the CPU microseconds per run of the worker, its children, the dispatcher,
PostgreSQL and Redis (bench/cputime.py) and the 1-minute load; then the ratios
djtasks / ours of each pair, their median and range.

    .venv/bin/python bench/djtasks_pairs.py [--pairs 5] [--n 20000]

Writes bench/results/djtasks-pairs-<YYYY-MM-DD>.json. Run it on servers of its own
(BENCH_PG_PORT, BENCH_REDIS_PORT: bench/common.py).
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def run_one(system: str, n: int) -> dict:
    # The enqueue is not on the drain's clock: 500 calls to a transaction, so a pair does
    # not spend minutes on one commit per call before its drain.
    extra = ["--enqueue-batch", "500"] if system == "djtasks" else []
    out = subprocess.run([sys.executable, str(BENCH / f"{system}.py"), "W2", "--n", str(n),
                          *extra], capture_output=True, text=True, check=False)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    details = result.get("details", {})
    return {"system": system, "figure": result.get("figure"), "failed": result.get("failed"),
            "drain_runs_per_s": details.get("drain_runs_per_s"),
            "cpu_us_per_run": details.get("cpu_us_per_run"), "load_1m": details.get("load_1m"),
            "enqueue_per_s": details.get("enqueue_per_s")}


def ratios(pairs: list[dict]) -> dict:
    """djtasks / ours per pair, with their median and range: of the wall figures (below 1:
    the layer costs throughput) and of the CPU per run (above 1: it costs CPU)."""
    def summary(values):
        return {"each": [round(v, 3) for v in values],
                "median": round(statistics.median(values), 3),
                "min": round(min(values), 3), "max": round(max(values), 3)}
    figure = [p["djtasks"]["figure"] / p["ours"]["figure"] for p in pairs]
    drain = [p["djtasks"]["drain_runs_per_s"] / p["ours"]["drain_runs_per_s"] for p in pairs]
    cpu = [p["djtasks"]["cpu_us_per_run"]["total"] / p["ours"]["cpu_us_per_run"]["total"]
           for p in pairs]
    return {"figure_djtasks_over_ours": summary(figure),
            "drain_djtasks_over_ours": summary(drain),
            "cpu_per_run_djtasks_over_ours": summary(cpu)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--n", type=int, default=20_000)
    args = parser.parse_args()
    pairs = []
    for i in range(args.pairs):
        order = ["ours", "djtasks"] if i % 2 == 0 else ["djtasks", "ours"]
        pair = {"order": order}
        for system in order:
            pair[system] = run_one(system, args.n)
            print(json.dumps(pair[system]), flush=True)
        if any(pair[s]["figure"] is None for s in order):
            raise SystemExit(f"pair {i + 1} failed: {pair}")
        pairs.append(pair)
    summary = ratios(pairs)
    out = BENCH / "results" / f"djtasks-pairs-{time.strftime('%Y-%m-%d')}.json"
    out.write_text(json.dumps({"n": args.n, "pairs": pairs, "ratios": summary}, indent=2)
                   + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
