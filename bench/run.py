"""Run the side-by-side benchmarks against peer schedulers and write the results
(BENCHMARKS.md, "Rules" and "Reproduce").

    .venv/bin/python bench/run.py [--quick] [--pairs K] [--only ours,celery,...]
                                  [--workloads W1,W2,...,ceiling] [--variants default,tuned]
                                  [--n N] [--no-md]

With no options it reproduces every table from scratch: each peer's virtualenv
bench/.venvs/<venv> is made from bench/peers/<peer>/requirements.txt (exact pins, PyPI
only) and reused while that file's hash is unchanged; then, per workload, each peer row
(bench/rows.py: every peer at its documented defaults and at its best documented tuning)
is measured in K interleaved pairs with ours (bench/pairs.py, default K = 3). Systems never
run at once. A crashed or timed-out adapter is recorded as failed and the run goes on.
Each workload starts once the machine has settled from the last (harness.settle: 85%
idle over 3 s, two minutes at most). With ours and pgqueuer, the W1 stage also measures
W1's floor, the CPU per job of both (bench/ingest_phases.py --pgqueuer --write), which the
W1 target's lines give; with ours and django-vtasks, one ``.enqueue()`` against both of its
backends and django-tasks-db, and the floors beside them (bench/enqueue_pairs.py), which
the ``.enqueue()`` targets' lines give (bench/floors.py).
Point it at servers of the run's own with BENCH_PG_PORT and BENCH_REDIS_PORT.

``--workloads W7`` (alone, with ``--pairs``) runs W7, workflows beside Celery's canvas,
through its own driver, bench/workflows.py.

Shorter runs, for checking in parts: ``--quick`` (small sizes, bench/rows.py QUICK_ARGS),
``--pairs 1``, ``--only`` (systems; ours is added to pair with them unless
``--no-ours``), ``--workloads``, ``--variants``, ``--n`` (one size for every run).
Cells not run keep their previous figures in summary.json, marked carried over with their
date.

The adapter contract (bench/ours.py, bench/ceiling.py, bench/peers/<peer>/bench.py): an
adapter takes the workload name (W1 ... W6) as its first argument, ``--quick`` for the
smaller sizes, ``--n``, and (peers) ``--variant default|tuned``; uses only its own
resources (its own PostgreSQL database and Redis db); stops every process it started; logs
progress on stderr; and prints one JSON object as its last stdout line (bench/common.py,
``emit_json``): ``{"workload", "figure", "unit", "details"}`` with the row's facts in
``details`` (common.row_facts: config, durable_history, history), or ``{"workload",
"unsupported": reason}``, or ``{"workload", "failed": reason}``.

Writes bench/results/<YYYY-MM-DD>.json (every run's raw result, merged over the day),
bench/results/summary.json (workload -> system -> variant -> row: median figure, range,
pairs, ours in the same pairs, ratio, load; plus the headline and the hardware), the
generated blocks of BENCHMARKS.md and bench/results/plots/*.png.
"""

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import common  # noqa: E402
import harness  # noqa: E402
import pairs as pairing  # noqa: E402
import report  # noqa: E402
import rows  # noqa: E402

RESULTS = BENCH / "results"
# Kept for bench/djtasks_w2.py and other callers of the earlier single-file run.py.
ensure_venv, run_adapter = harness.ensure_venv, harness.run_adapter


def parse_list(value: str | None, allowed: list[str], what: str) -> list[str]:
    if not value:
        return list(allowed)
    items = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in items if v not in allowed]
    if bad:
        raise SystemExit(f"--{what}: unknown {bad}; choose from {','.join(allowed)}")
    return items


def ours_row(workload: str, cells: dict) -> dict | None:
    """Our row over every run of ours in the workload's cells (all pairs)."""
    figures, rest, loads = [], [], []
    runs, seen = [], set()
    for cell in cells.values():
        for p in cell["pairs"]:
            run = p.get("ours")
            # A chained run of ours (pairs.run_chain) is in two pairs: counted once.
            if not run or workload == "ceiling" or run.get("run_id", id(run)) in seen:
                continue
            seen.add(run.get("run_id", id(run)))
            runs.append(run)
    # W2's pairs run ours at each row's N: our row is its runs at the largest N. W3 has
    # no n in our details: the jobs submitted (pairs.size_of; 0 showed as "0.00").
    sizes = [pairing.size_of(r.get("details")) or 0 for r in runs]
    largest = max(sizes, default=None)
    n = largest or None
    for r, size in zip(runs, sizes, strict=True):
        if size != largest:
            continue
        figures.append(pairing.figure_of(r, workload))
        details = r.get("details") or {}
        rest.append((details.get("rest_bulk") or {}).get("jobs_per_s"))
        loads += r.get("load_1m", [])
    if not figures:
        return None
    row = {"system": "ours", "variant": "default", "label": "ours",
           "figure": pairing.spread(figures), "ours": pairing.spread(figures),
           "pairs": sum(1 for f in figures if f is not None), "n": n,
           "load_1m": [min(loads), max(loads)] if loads else None, "durable_history": True,
           "history": "durable: a run row and an attempt row per run, in PostgreSQL",
           "config": "runworker --concurrency 2 (our defaults otherwise: up to 256 runs "
                     "leased ahead per child, up to 128 per pipe message) + rundispatcher, "
                     "Redis broker" if workload not in ("W1", "W6") else
                     "create_jobs (Python bulk API, batches of 10,000); REST bulk in details"
                     if workload == "W1" else "create_jobs, Redis broker",
           "unit": next((p["ours"].get("unit") for c in cells.values() for p in c["pairs"]
                         if p.get("ours")), "")}
    if workload == "W1":
        row["ours_rest"] = pairing.spread(rest)
    return row


def measure_beside(what: str, script: str, args: list[str], timeout_s: int,
                   notes: list[str]) -> None:
    """Once the machine has settled, run bench/``script`` with ``args``, which saves a
    results file a Targets line reads (bench/floors.py); a failure or a run past
    ``timeout_s`` seconds is noted as ``what`` not measured, not raised."""
    harness.settle()
    common.log(f"[run] {what} (bench/{script})")
    try:
        done = subprocess.run([sys.executable, str(BENCH / script), *args],
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        notes.append(f"{what} not measured: bench/{script} ran past {timeout_s} s")
        return
    if done.returncode:
        notes.append(f"{what} not measured: {(done.stdout + done.stderr)[-300:]}")


def w7(pairs: int) -> int:
    """``--workloads W7``: workflows beside Celery's canvas, which has a driver of its own
    (bench/workflows.py: its own shapes, figures and bench/results/workflows.json, ours
    paired with Celery only); Celery's virtualenv is made here as for the other rows.
    Returns the driver's exit status."""
    import subprocess

    pairing.python_of("celery", [])
    return subprocess.call([sys.executable, str(BENCH / "workflows.py"), "--pairs", str(pairs)])


def main() -> None:
    if "--workloads" in sys.argv and sys.argv[sys.argv.index("--workloads") + 1:][:1] == ["W7"]:
        pairs = sys.argv[sys.argv.index("--pairs") + 1] if "--pairs" in sys.argv else "3"
        raise SystemExit(w7(int(pairs)))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--only", help="comma-separated systems: " + ",".join(rows.SYSTEMS))
    parser.add_argument("--workloads", help="comma-separated: " + ",".join(rows.WORKLOADS))
    parser.add_argument("--variants", help="comma-separated: default,tuned")
    parser.add_argument("--n", type=int, help="one size for every run (W1-W4, W6)")
    parser.add_argument("--no-ours", action="store_true", help="peer runs only, no pairs")
    parser.add_argument("--no-md", action="store_true", help="do not rewrite BENCHMARKS.md")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: redo the headline, the plots and BENCHMARKS.md "
                             "from bench/results/summary.json")
    args = parser.parse_args()
    if args.report_only:
        summary = json.loads((RESULTS / "summary.json").read_text())
        # Our row over every pair of the day's commands (each command's own row saw only
        # its pairs): from the dated file's raw cells.
        dated = RESULTS / f"{date.today().isoformat()}.json"
        raw = json.loads(dated.read_text()).get("pairs", {}) if dated.exists() else {}
        for workload, cells in raw.items():
            mine = ours_row(workload, cells)
            if mine and workload in summary:
                summary[workload]["ours"] = {"default": dict(
                    mine, date=date.today().isoformat(), quick=False, carried=False)}
        write_results({}, {}, summary["hardware"], summary.get("command", "python bench/run.py"),
                      date.today().isoformat(), [], time.monotonic(), args, keep=summary)
        return
    systems = parse_list(args.only, list(rows.SYSTEMS), "only")
    # Ours runs alone only when asked for (no --only, or --only naming it); otherwise it
    # is there to pair with the peers named.
    ours_alone = "ours" in systems
    if not args.no_md and importlib.util.find_spec("matplotlib") is None:
        # Found out at the end, this cost a full run its plots (2026-12-02): say it first.
        parser.error("matplotlib is missing, so the plots of BENCHMARKS.md cannot be "
                     "drawn: pip install -e '.[bench]' (or pass --no-md)")
    if "ours" not in systems and not args.no_ours:
        systems.insert(0, "ours")
    workloads = parse_list(args.workloads, rows.WORKLOADS, "workloads")
    workloads.sort(key=rows.RUN_ORDER.index)
    variants = parse_list(args.variants, rows.VARIANTS, "variants")
    command = "python bench/run.py" + "".join(f" {a}" for a in sys.argv[1:])
    today = date.today().isoformat()
    began = time.monotonic()
    notes: list[str] = []
    hw = harness.hardware()
    log_dir = Path(tempfile.gettempdir()) / "bench-logs" / today
    log_dir.mkdir(parents=True, exist_ok=True)
    pythons = {"ours": Path(sys.executable)}
    for system in systems:
        if system != "ours":
            try:
                pythons[system] = pairing.python_of(system, notes)
            except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
                notes.append(f"{system}: virtualenv could not be made ({exc})")
    raw: dict = {}
    summary_new: dict = {}
    for workload in workloads:
        cells = {}
        quiet = harness.settle()
        common.log(f"[run] {workload}: machine {quiet['idle_share']} idle after "
                   f"{quiet['waited_s']} s")
        peers = [s for s in systems if s != "ours" and s in pythons
                 and workload in rows.SYSTEMS[s]["workloads"] and workload != "ceiling"]
        with_ours = "ours" in systems and not args.no_ours
        keys = [(system, variant) for system in peers
                for variant in rows.variants_of(system, workload)
                if variant in variants or workload not in rows.WORKER_WORKLOADS]
        if workload in rows.CHAINED and with_ours and keys:
            # Ours runs at one size for every row: one run of ours partners the rows on
            # either side of it (pairs.chain_plan).
            common.log(f"[run] {workload}: {len(keys)} rows chained, {args.pairs} rounds")
            cells = pairing.run_chain(
                keys, workload, pythons, args.pairs, args.quick, args.n, log_dir,
                on_pair=lambda c, w=workload: checkpoint(
                    w, c, raw, summary_new, (hw, command, today, notes, began, args)))
            keys = []
        for system, variant in keys:
            common.log(f"[run] {workload}: {system}/{variant}, {args.pairs} pairs")
            cells[(system, variant)] = pairing.run_cell(
                system, variant, workload, pythons, args.pairs, args.quick, args.n,
                log_dir, with_ours=with_ours)
            checkpoint(workload, cells, raw, summary_new, (hw, command, today, notes, began,
                       args))
        if workload == "ceiling" and ours_alone:
            cells[("ours", "default")] = pairing.run_cell(
                "ours", "default", "ceiling", pythons, args.pairs, args.quick, None, log_dir)
        elif ours_alone and not peers and workload in rows.SYSTEMS["ours"]["workloads"]:
            # Ours alone (e.g. --only ours, or W5 with no peer): K runs of ours.
            cells[("ours", "alone")] = {"pairs": [
                {"order": ["ours"], "ours": pairing.one_run(
                    "ours", workload, pythons["ours"], "default",
                    rows.size_args("ours", workload, args.quick, args.n), args.quick,
                    log_dir)} for _ in range(args.pairs)]}
        if workload == "W1" and with_ours and "pgqueuer" in pythons and not args.quick:
            # W1's floor: CPU per job of ours and of pgqueuer's bulk enqueue.
            measure_beside("W1 floor", "ingest_phases.py",
                           ["--pgqueuer", "--rounds", "3", "--write"], 900, notes)
        if (workload == "W1" and with_ours and {"vtasks", "vtasksvk"} <= set(pythons)
                and not args.quick):
            # One .enqueue() against django-vtasks' two backends and django-tasks-db.
            measure_beside(".enqueue() rows", "enqueue_pairs.py",
                           ["--pairs", "5", "--n", "1000"], 1200, notes)
        checkpoint(workload, cells, raw, summary_new, (hw, command, today, notes, began, args),
                   final=workload == workloads[-1])


def checkpoint(workload: str, cells: dict, raw: dict, summary_new: dict, run: tuple,
               final: bool = False) -> None:
    """Fold a workload's cells so far into ``raw`` and ``summary_new`` and write the
    results files; ``run`` is write_results' (hw, command, today, notes, began, args).
    Called after every cell: a full run takes hours, and a run stopped part-way keeps every
    cell it finished (the next command of the day merges over it). ``final``: the plots
    and BENCHMARKS.md too."""
    hw, command, today, notes, began, args = run
    summary_new[workload] = summarise(workload, cells, today, args.quick)
    raw[workload] = {f"{s}/{v}": c for (s, v), c in cells.items()}
    write_results(raw, summary_new, hw, command, today, notes, began, args, reports=final)


def summarise(workload: str, cells: dict, today: str, quick: bool) -> dict:
    """A workload's summary rows (system -> row name -> row) from its cells so far,
    ``{(system, variant): {"pairs": [...]}}``; ours is one row over all its pairs."""
    wsum: dict = {}
    for (system, variant), cell in cells.items():
        # A chained cell not reached yet (pairs.run_chain) has no pairs: no row, so that
        # a run stopped part-way keeps that row's earlier figures, carried over.
        if (system == "ours" and workload != "ceiling") or not cell["pairs"]:
            continue
        names = ["default", "tuned"] if workload == "W1" and system != "ours" else [variant]
        for row in names:
            wsum.setdefault(system, {})[row] = dict(
                pairing.aggregate(system, workload, cell, row), date=today, quick=quick)
    mine = ours_row(workload, cells)
    if mine:
        wsum["ours"] = {"default": dict(mine, date=today, quick=quick)}
    return wsum


def write_results(raw, summary_new, hw, command, today, notes, began, args,
                  keep: dict | None = None, reports: bool = True) -> None:
    """The dated raw file, summary.json (this run's rows over the previous summary's, those
    marked carried over), and with ``reports`` the plots and BENCHMARKS.md; ``keep``: a
    summary to rewrite the reports of as it is (--report-only). Called again with more
    cells, it gives the same files as one call with all of them: the dated file's cells
    and the summary's rows are replaced by key, never appended."""
    if keep is not None:
        keep["headline"] = report.headline(keep)
        (RESULTS / "summary.json").write_text(json.dumps(keep, indent=1, sort_keys=True) + "\n")
        _reports(keep, hw, keep.get("command", command), keep.get("notes", []), args)
        return
    RESULTS.mkdir(exist_ok=True)
    dated = RESULTS / f"{today}.json"
    earlier = json.loads(dated.read_text()) if dated.exists() else {}
    merged = earlier.get("pairs", {}) if "pairs" in earlier else {}
    for workload, cells in raw.items():
        merged.setdefault(workload, {}).update(cells)
    dated.write_text(json.dumps(
        {"date": today, "hardware": hw, "runs": earlier.get("runs", []) + [command],
         "notes": notes, "pairs": merged}, indent=1, sort_keys=True, default=str) + "\n")
    path = RESULTS / "summary.json"
    previous = json.loads(path.read_text()) if path.exists() else {}
    summary = {}
    for workload in rows.WORKLOADS:
        # A row from an earlier day is marked carried over; one from an earlier command of
        # the same session (the full run can be taken in parts) is this session's.
        old = {s: {v: dict(r, carried=r.get("date") != today) for v, r in by.items()
                   if "pairs" in r}
               for s, by in (previous.get(workload) or {}).items() if isinstance(by, dict)
               and all(isinstance(r, dict) for r in by.values())}
        for system, by in summary_new.get(workload, {}).items():
            old.setdefault(system, {}).update(by)
        old = {s: by for s, by in old.items() if by}
        if old:
            summary[workload] = old
    summary["headline"] = report.headline(summary)
    summary["hardware"] = hw
    summary["rules"] = "BENCHMARKS.md, \"Rules\""
    summary["command"], summary["notes"] = command, notes
    path.write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    if not reports:
        common.log(f"[run] checkpoint after {time.monotonic() - began:.0f} s: {dated}, {path}")
        return
    _reports(summary, hw, command, notes, args)
    common.log(f"[run] done in {time.monotonic() - began:.0f} s: {dated}, {path}")


def _reports(summary, hw, command, notes, args) -> None:
    plots = []
    try:
        import plots as plotting

        plots = plotting.make_all(summary, RESULTS / "plots")
    except ImportError as exc:
        notes.append(f"plots not made: {exc} (pip install -e '.[bench]')")
    if not args.no_md:
        report.write_md(summary, hw, command, notes, plots)


if __name__ == "__main__":
    main()
