"""W2 through Django's task framework, side by side (BENCHMARKS.md, "django.tasks"):
20,000 no-op ``@task`` calls enqueued with ``.enqueue()`` and drained by two worker
processes, on this project's backend (bench/djtasks.py), django-tasks-db
(bench/peers/djtasksdb) and django-vtasks (bench/peers/vtasks), each at its defaults, plus
this project's own W2 (bench/ours.py, jobs made by create_jobs) for the cost of the
django.tasks layer. One system at a time, each in its own virtualenv (bench/run.py's).

    .venv/bin/python bench/djtasks_w2.py [--quick] [--only djtasks,ours,djtasksdb,vtasks]

Writes bench/results/djtasks-<YYYY-MM-DD>.json (the figures of systems not run this time
are kept from an earlier run of the same day).
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import common  # noqa: E402
import run  # noqa: E402

SYSTEMS = ["djtasks", "ours", "djtasksdb", "vtasks"]


def command(system: str, quick: bool, notes: list[str]) -> list[str]:
    extra = ["--quick"] if quick else []
    if system == "djtasks":
        return [sys.executable, str(BENCH / "djtasks.py"), "W2", *extra]
    if system == "ours":
        # A database and key prefix of its own, beside a full bench/run.py's bench_ours.
        os.environ.update(BENCH_OURS_DB="bench_djtasks_ours", BENCH_OURS_PREFIX="benchdjo")
        return [sys.executable, str(BENCH / "ours.py"), "W2", *extra]
    python = run.ensure_venv(system, notes)
    return [str(python), str(BENCH / "peers" / system / "bench.py"), "W2", *extra]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default=",".join(SYSTEMS))
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args()
    notes: list[str] = []
    results = {}
    for system in args.only.split(","):
        common.log(f"[djtasks_w2] {system}")
        log_path = Path(f"/tmp/bench-djtasks-w2-{system}.log")
        results[system] = run.run_adapter(command(system, args.quick, notes), "W2",
                                          args.timeout, log_path)
        common.log(f"[djtasks_w2] {system}: {results[system].get('figure')} "
                   f"{results[system].get('unit', '')}")
    out = BENCH / "results" / f"djtasks-{time.strftime('%Y-%m-%d')}.json"
    # A run of some systems keeps the other systems' figures of the same day.
    earlier = json.loads(out.read_text()) if out.exists() else {"results": {}}
    out.write_text(json.dumps({"quick": args.quick, "hardware": common.hardware(),
                               "notes": notes, "results": {**earlier["results"], **results}},
                              indent=2) + "\n")
    print(json.dumps({s: r.get("figure") for s, r in results.items()}))


if __name__ == "__main__":
    main()
