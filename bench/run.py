"""Run the side-by-side benchmarks against peer schedulers and write the results (BENCHMARKS.md).

    .venv/bin/python bench/run.py [--quick] [--only ours,celery,rq,dramatiq,procrastinate,djangoq]
                                  [--workloads W1,W2,W3,W4,W5,W6,ceiling]

Systems run one after the other (never two at once), each workload in a subprocess with a
timeout: ours with this project's virtualenv (bench/ours.py, bench/ceiling.py), each peer
with its own virtualenv bench/.venvs/<peer>, made from bench/peers/<peer>/requirements.txt
(exact pins) and reused while that file's hash is unchanged. A crashed or timed-out
adapter is recorded as failed and the run goes on; a peer without an adapter yet is
skipped with a note.

The adapter contract (bench/ours.py and bench/peers/<peer>/bench.py): an adapter takes the
workload name (W1 ... W6) as its first argument and ``--quick`` for the smaller sizes,
uses only its own resources (its own PostgreSQL database and Redis db), stops every
process it started, logs progress on stderr, and prints one JSON object as its last
stdout line (bench/common.py, ``emit_json``): ``{"workload", "figure", "unit",
"details"}``, or ``{"workload", "unsupported": reason}`` when the system cannot do the
workload, or ``{"workload", "failed": reason}``.

Writes bench/results/<YYYY-MM-DD>.json (everything, with each adapter's details),
bench/results/summary.json (workload -> system -> figure and unit, plus hardware),
the generated part of BENCHMARKS.md and bench/results/plots/*.png.

``--quick`` shrinks sizes (QUICK_ARGS below: W1 2,000 jobs with ours' one-call-per-job
phases sampled, W2 1,000, W3 5 s, W5 up to 100 K cron jobs, W6 5,000 pending), skips W4,
which costs up to a minute per system waiting for a minute boundary (ask for it with
``--workloads W4``), and the peers' W5 (ours only by the contract); the output's notes
say so. It is meant to finish in under 5 minutes once the virtualenvs exist.

A timed-out adapter gets SIGTERM first (its handler stops the workers it started in
sessions of their own), then SIGKILL 15 s later.
"""

import argparse
import hashlib
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

import common  # noqa: E402

RESULTS = BENCH / "results"
VENVS = BENCH / ".venvs"
PEERS = ["celery", "rq", "dramatiq", "procrastinate", "djangoq"]
SYSTEMS = ["ours", *PEERS]
WORKLOADS = ["W1", "W2", "W3", "W4", "W5", "W6", "ceiling"]
# Which way is better, per workload: the table's ratios are "times better than the
# fastest peer" either way.
HIGHER_IS_BETTER = {"W1": True, "W2": True, "W3": False, "W4": False, "W5": False,
                    "W6": False, "ceiling": True}
TITLES = {
    "W1": "W1 ingest (best path)", "W2": "W2 drain 20 K no-op jobs, 2 worker processes",
    "W3": "W3 lag p99 at 116 jobs/s for 60 s",
    "W4": "W4 20 K cron jobs due at one minute: last started",
    "W5": "W5 scheduler tick, 1 M cron jobs (1 K due)", "W6": "W6 Redis bytes per pending run",
    "ceiling": "Ceiling: W2's writes by a bare loop",
}
QUICK_TITLES = dict(
    TITLES, W2="W2 drain 1 K no-op jobs, 2 worker processes (quick)",
    W3="W3 lag p99 at 116 jobs/s for 5 s (quick)",
    W4="W4 1 K cron jobs due at one minute: last started (quick)",
    W5="W5 scheduler tick, 100 K cron jobs (1 K due) (quick)",
)
LABELS = {"ours": "ours", "celery": "Celery", "rq": "RQ", "dramatiq": "Dramatiq",
          "procrastinate": "procrastinate", "djangoq": "django-q2"}
BEGIN, END = "<!-- bench/run.py: begin -->", "<!-- bench/run.py: end -->"


# --- virtualenvs -----------------------------------------------------------------------


def peer_python(peer: str) -> tuple[list[str], dict]:
    """The interpreter (argv prefix, extra env) a peer's venv is made with: its
    python.txt version through pyenv ("3.12.1"), else scripts/find-python's answer."""
    wanted = BENCH / "peers" / peer / "python.txt"
    if wanted.exists():
        version = wanted.read_text().strip()
        minor = ".".join(version.split(".")[:2])
        return [f"python{minor}"], {"PYENV_VERSION": version}
    path = subprocess.run([str(ROOT / "scripts" / "find-python")], capture_output=True,
                          text=True, check=True).stdout.strip()
    return [path], {}


def ensure_venv(peer: str, notes: list[str]) -> Path:
    """bench/.venvs/<peer>/bin/python, created or brought to requirements.txt's pins when
    the file's hash differs from the one stored in the venv. Never deletes a venv: pip
    moves it to the pins (a peer helper may be using it)."""
    requirements = BENCH / "peers" / peer / "requirements.txt"
    venv = VENVS / peer
    python = venv / "bin" / "python"
    digest = hashlib.sha256(requirements.read_bytes()).hexdigest()
    stamp = venv / ".requirements.sha256"
    if python.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return python
    if not python.exists():
        argv, extra = peer_python(peer)
        common.log(f"[run] creating {venv} with {' '.join(argv)}")
        subprocess.run([*argv, "-m", "venv", str(venv)], check=True,
                       env={**os.environ, **extra})
    common.log(f"[run] installing {requirements} into {venv}")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "-r", str(requirements)],
                   check=True)
    stamp.write_text(digest + "\n")
    notes.append(f"{peer}: virtualenv installed from requirements.txt ({digest[:12]})")
    return python


# --- running adapters ------------------------------------------------------------------


def last_json(stdout: str) -> dict | None:
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
        if line:
            return None
    return None


def run_adapter(cmd: list[str], workload: str, timeout: float, log_path: Path) -> dict:
    """Run one adapter (its own process group, killed on timeout); returns its JSON
    result, or {"failed": why}."""
    common.log(f"[run] {shlex.join(cmd)}")
    began = time.monotonic()
    with open(log_path, "w") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True,
                                start_new_session=True)
        try:
            stdout, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop_group(proc)
            stdout, _ = proc.communicate()
            return {"workload": workload, "failed": f"timed out after {timeout:.0f} s",
                    "elapsed_s": round(time.monotonic() - began, 1), "log": str(log_path)}
        finally:
            _stop_group(proc)
    elapsed = round(time.monotonic() - began, 1)
    result = last_json(stdout)
    if result is None or proc.returncode:
        tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
        why = f"exit code {proc.returncode}" if proc.returncode else "no JSON result line"
        return {"workload": workload, "failed": f"{why}: {' | '.join(tail)[-400:]}",
                "elapsed_s": elapsed, "log": str(log_path)}
    result["elapsed_s"] = elapsed
    return result


def _stop_group(proc: subprocess.Popen, grace_s: float = 15.0) -> None:
    """SIGTERM the adapter's process group, give it up to ``grace_s`` seconds, then
    SIGKILL the group. The adapters start their workers in sessions of their own
    (common.spawn), which a signal to the adapter's group does not reach: only the
    adapter's SIGTERM handler (common.install_signal_handlers) stops them, so it must get
    the chance to run before the SIGKILL."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            common.log(f"[run] adapter {proc.pid} still running {grace_s:.0f} s after "
                       f"SIGTERM: SIGKILL")
    # Whatever is left in the adapter's own group (e.g. a psql child).
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# --quick passes these sizes to every adapter, smaller than the contract's quick defaults
# so that the whole run fits in 5 minutes on 2 cores (the slowest peers drain ~80 jobs/s
# and publish ~400 jobs/s one call at a time). The figures are rates, percentiles and
# bytes per run, so they stay comparable with a full run's, only noisier.
QUICK_ARGS = {"W1": ["--n", "2000"], "W2": ["--n", "1000"], "W3": ["--duration", "5"],
              "W6": ["--n", "5000"]}
QUICK_SIZES = "W1 2,000 jobs, W2 1,000 jobs, W3 5 s, W5 up to 100 K cron jobs (ours only), " \
              "W6 5,000 pending"
FULL_SIZES = "W1 20,000 jobs, W2 20,000 jobs, W3 60 s, W4 20,000 cron jobs (ours also " \
             "50,000), W5 up to 1 M cron jobs, W6 50,000 pending"


def adapter_cmd(system: str, workload: str, python: Path, quick: bool) -> list[str]:
    flags = ["--quick", *QUICK_ARGS.get(workload, [])] if quick else []
    if system == "ours":
        if workload == "ceiling":
            return [str(python), str(BENCH / "ceiling.py"), *flags]
        return [str(python), str(BENCH / "ours.py"), workload, *flags]
    return [str(python), str(BENCH / "peers" / system / "bench.py"), workload, *flags]


def timeout_for(workload: str, quick: bool) -> float:
    if quick:
        return 150.0
    return {"W4": 1800.0, "W5": 1800.0}.get(workload, 900.0)


# --- facts about the machine -----------------------------------------------------------


def hardware() -> dict:
    """CPU model, cores, RAM, PostgreSQL, Redis and Python versions."""
    line = common.hardware()
    try:
        pg = common.pg_exec_sql("postgres", "SHOW server_version").split()[0]
    except (subprocess.CalledProcessError, OSError) as exc:
        pg = f"unknown ({exc})"
    try:
        client = common.Redis(0)
        info = client.execute("INFO", "server").decode()
        client.close()
        redis_version = next(x.split(":", 1)[1] for x in info.splitlines()
                             if x.startswith("redis_version:"))
    except (OSError, RuntimeError, StopIteration) as exc:
        redis_version = f"unknown ({exc})"
    cpu = line.split(",")[0]
    mem = next((p.strip() for p in line.split(",") if "GiB" in p), "")
    return {"cpu": cpu, "cores": os.cpu_count(), "ram": mem, "postgresql": pg,
            "redis": redis_version, "python": platform.python_version(),
            "os": f"{platform.system()} {platform.release()}", "line": line,
            "load_1m_at_start": round(os.getloadavg()[0], 2)}


# --- summary, BENCHMARKS.md ------------------------------------------------------------


def entry(result: dict) -> dict:
    """The summary's cell for one adapter result."""
    if "unsupported" in result:
        return {"unsupported": result["unsupported"]}
    if result.get("failed") or result.get("figure") is None:
        return {"failed": result.get("failed") or "no figure"}
    cell = {"figure": result["figure"], "unit": result.get("unit", "")}
    # The two halves of "W2 against the ceiling" (bench/ceiling.py's docstring).
    for key in CEILING_KEYS.get(result.get("workload"), ()):
        if result.get("details", {}).get(key) is not None:
            cell[key] = result["details"][key]
    return cell


CEILING_KEYS = {"W2": ("drain_runs_per_s",), "ceiling": ("cold_runs_per_s",)}


def ceiling_line(summary: dict) -> str | None:
    """W2 against the ceiling, like for like: W2 (from the worker's launch) over the cold
    ceiling (bare loop from its launch), and W2's drain (first lease to last ack) over the
    warm ceiling (bare loop already started). The target is at least half."""
    w2, ceiling = summary.get("W2", {}).get("ours", {}), summary.get("ceiling", {}).get("ours", {})
    if not (w2.get("figure") and ceiling.get("figure") and w2.get("drain_runs_per_s")
            and ceiling.get("cold_runs_per_s")):
        return None
    cold = w2["figure"] / ceiling["cold_runs_per_s"]
    warm = w2["drain_runs_per_s"] / ceiling["figure"]
    return (f"**W2 against the ceiling** (target: at least half). From launch: W2 "
            f"{fmt(w2['figure'])} jobs/s is **{cold:.0%}** of the bare loop started cold "
            f"({fmt(ceiling['cold_runs_per_s'])} runs/s, fresh interpreters timed from "
            f"launch). Without start-up: W2's drain, first lease to last ack, "
            f"{fmt(w2['drain_runs_per_s'])} runs/s, is **{warm:.0%}** of the bare loop "
            f"started warm ({fmt(ceiling['figure'])} runs/s, forked with its libraries "
            f"loaded).")


def build_summary(results: dict, hw: dict, previous: dict, today: str,
                  quick: bool) -> dict:
    """workload -> system -> cell; cells of systems not run now are kept from the previous
    summary (with their date), so ``--only ours`` refreshes only our column."""
    summary = {}
    for workload in WORKLOADS:
        row = {}
        for system in SYSTEMS:
            if workload in results.get(system, {}):
                row[system] = dict(entry(results[system][workload]), date=today,
                                   quick=quick)
            elif system in previous.get(workload, {}):
                row[system] = previous[workload][system]
        if row:
            summary[workload] = row
    summary["hardware"] = hw
    return summary


def fmt(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


SCALE = {"s": 1000.0, "ms": 1.0, "bytes": 1.0, "bytes/run": 1.0, "jobs/s": 1.0,
         "runs/s": 1.0}


def norm(c: dict) -> float:
    """A cell's figure in its workload's common unit (ms for times), so that an adapter
    reporting seconds compares with one reporting milliseconds."""
    return c["figure"] * SCALE.get(c.get("unit", ""), 1.0)


def best_peer(row: dict, workload: str) -> tuple[str, float] | None:
    figures = [(s, norm(row[s])) for s in PEERS if "figure" in row.get(s, {})
               and row[s]["figure"]]
    if not figures:
        return None
    pick = max if HIGHER_IS_BETTER[workload] else min
    return pick(figures, key=lambda x: x[1])


def carried(c: dict, today: str, quick: bool) -> bool:
    """True when a cell was kept from an earlier run (another day, or the other mode)."""
    return c.get("date") != today or bool(c.get("quick")) != quick


def cell(row: dict, system: str, workload: str, best, today: str, quick: bool) -> str:
    c = row.get(system)
    if c is None:
        return "not run"
    mark = " †" if carried(c, today, quick) else ""
    if "unsupported" in c:
        return "unsupported" + mark
    if "failed" in c:
        return "failed" + mark
    text = f"{fmt(c['figure'])} {c['unit']}{mark}"
    if best and c["figure"]:
        ratio = (norm(c) / best[1] if HIGHER_IS_BETTER[workload]
                 else best[1] / norm(c))
        text += f" (**{ratio:.2f}x**)" if system == "ours" else f" ({ratio:.2f}x)"
    return text


def table(summary: dict, today: str, quick: bool) -> str:
    titles = QUICK_TITLES if quick else TITLES
    header = "| workload | " + " | ".join(LABELS[s] for s in SYSTEMS) + " |"
    lines = [header, "|---" * (len(SYSTEMS) + 1) + "|"]
    for workload in WORKLOADS:
        row = summary.get(workload)
        if not row:
            continue
        best = best_peer(row, workload)
        arrow = "higher is better" if HIGHER_IS_BETTER[workload] else "lower is better"
        lines.append(f"| {titles[workload]} ({arrow}) | "
                     + " | ".join(cell(row, s, workload, best, today, quick)
                                  for s in SYSTEMS) + " |")
    return "\n".join(lines)


def notes_for(summary: dict, today: str, quick: bool) -> list[str]:
    out, old = [], []
    for workload in WORKLOADS:
        for system in SYSTEMS:
            c = summary.get(workload, {}).get(system, {})
            for kind in ("unsupported", "failed"):
                if kind in c:
                    out.append(f"* {workload}, {LABELS[system]}: {kind}: {c[kind]}")
            if c and carried(c, today, quick):
                mode = "--quick" if c.get("quick") else "full" if "quick" in c else "?"
                old.append(f"{workload} {LABELS[system]} ({c.get('date')}, {mode})")
    if old:
        out.append("* † kept from an earlier run (not measured by this command): "
                   + "; ".join(old))
    return out


def write_benchmarks_md(summary: dict, command: str, today: str, notes: list[str],
                        quick: bool) -> None:
    hw = summary["hardware"]
    plots = sorted((RESULTS / "plots").glob("*.png"))
    body = [
        BEGIN,
        "",
        "## Side by side",
        "",
        f"Measured {today} by `{command}`; the figures are in "
        f"[bench/results/summary.json](bench/results/summary.json) and every adapter's "
        f"details (commands, versions, raw numbers) in `bench/results/<date>.json`.",
        "",
        f"**Hardware.** {hw['cpu']}, {hw['cores']} cores, {hw['ram']}; PostgreSQL "
        f"{hw['postgresql']}, Redis {hw['redis']}, Python {hw['python']} ({hw['os']}); "
        f"1-minute load at the start {hw.get('load_1m_at_start')}. Everything on one machine, "
        f"shared with the benchmark's own clients.",
        "",
        "Each cell: the figure, then in brackets how many times better it is than the best "
        "peer's figure for that workload (>1 is better; for lower-is-better workloads the "
        "ratio is best peer / figure). Peers run with 2 worker processes, at-least-once "
        "settings per their docs; their setups are in bench/peers/<peer>/.",
        "",
        f"Sizes: {QUICK_SIZES if quick else FULL_SIZES}.",
        "",
        table(summary, today, quick),
        "",
    ]
    line = ceiling_line(summary)
    if line:
        body += [line, ""]
    extra = notes_for(summary, today, quick) + [f"* {n}" for n in notes]
    if extra:
        body += ["Notes:", "", *extra, ""]
    if plots:
        body += ["Plots: " + ", ".join(f"[{p.stem}](bench/results/plots/{p.name})"
                                       for p in plots), ""]
        body += [f"![{p.stem}](bench/results/plots/{p.name})" for p in plots] + [""]
    body.append(END)
    path = ROOT / "BENCHMARKS.md"
    text = path.read_text()
    generated = "\n".join(body)
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        text = head + generated + tail
    else:
        title, _, rest = text.partition("\n")
        text = f"{title}\n\n{generated}\n{rest}"
    path.write_text(text)


# --- main ------------------------------------------------------------------------------


def parse_list(value: str | None, allowed: list[str], what: str) -> list[str]:
    if not value:
        return list(allowed)
    items = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in items if v not in allowed]
    if bad:
        raise SystemExit(f"--{what}: unknown {bad}; choose from {','.join(allowed)}")
    return items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", help="comma-separated systems: " + ",".join(SYSTEMS))
    parser.add_argument("--workloads", help="comma-separated: " + ",".join(WORKLOADS))
    parser.add_argument("--no-md", action="store_true", help="do not rewrite BENCHMARKS.md")
    args = parser.parse_args()
    systems = parse_list(args.only, SYSTEMS, "only")
    asked = parse_list(args.workloads, WORKLOADS, "workloads")
    command = "python bench/run.py" + "".join(
        f" {a}" for a in sys.argv[1:])
    today = date.today().isoformat()
    began = time.monotonic()
    notes: list[str] = []
    workloads = list(asked)
    if args.quick and not args.workloads:
        workloads.remove("W4")
        notes.append("--quick skips W4 (each system would wait for a minute boundary); "
                     "run it with --workloads W4")
    if args.quick:
        notes.append(f"--quick sizes: {QUICK_SIZES}. With 1,000 jobs, W2's clock (from the "
                     "workers' start) is mostly start-up, and W3's p99 rests on ~580 "
                     "samples: compare those from a full run")
    hw = hardware()
    # Adapter stderr, for a failed cell: outside the repository (not results).
    log_dir = Path(tempfile.gettempdir()) / "bench-logs" / today
    log_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    skipped_w5: list[str] = []
    for system in systems:
        if system == "ours":
            python = Path(sys.executable)
        else:
            adapter = BENCH / "peers" / system / "bench.py"
            if not adapter.exists():
                notes.append(f"{system}: skipped, bench/peers/{system}/bench.py does not exist yet")
                common.log(f"[run] {notes[-1]}")
                continue
            try:
                python = ensure_venv(system, notes)
            except (subprocess.CalledProcessError, OSError) as exc:
                notes.append(f"{system}: virtualenv could not be made ({exc})")
                results[system] = {w: {"workload": w, "failed": "virtualenv could not be made"}
                                   for w in workloads if w != "ceiling"}
                continue
        results[system] = {}
        for workload in workloads:
            if workload == "ceiling" and system != "ours":
                continue
            if args.quick and workload == "W5" and system != "ours":
                # W5 is ours only by the contract; a peer's (django-q2 loads 100 K
                # schedules) costs more than the rest of its quick run.
                skipped_w5.append(LABELS[system])
                continue
            cmd = adapter_cmd(system, workload, python, args.quick)
            result = run_adapter(cmd, workload, timeout_for(workload, args.quick),
                                 log_dir / f"{system}-{workload}.log")
            result["command"] = shlex.join(cmd)
            results[system][workload] = result
            shown = {k: result.get(k) for k in ("figure", "unit", "unsupported", "failed")
                     if result.get(k) is not None}
            common.log(f"[run] {system} {workload}: {json.dumps(shown)} "
                       f"({result.get('elapsed_s')} s)")
    if skipped_w5:
        notes.append(f"--quick does not run the peers' W5 ({', '.join(skipped_w5)}): the "
                     "contract measures W5 for ours only")
    RESULTS.mkdir(exist_ok=True)
    full = {"date": today, "command": command, "quick": args.quick, "hardware": hw,
            "elapsed_s": round(time.monotonic() - began, 1), "notes": notes,
            "results": results}
    dated = RESULTS / f"{today}.json"
    if dated.exists():
        # Another run the same day (e.g. --only ours): keep the others' details.
        merged = json.loads(dated.read_text()).get("results", {})
        for system, by_workload in results.items():
            merged.setdefault(system, {}).update(by_workload)
        full["results"] = merged
        full["runs"] = json.loads(dated.read_text()).get("runs", []) + [command]
    dated.write_text(json.dumps(full, indent=1, sort_keys=True, default=str) + "\n")
    summary_path = RESULTS / "summary.json"
    previous = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    summary = build_summary(results, hw, previous, today, args.quick)
    summary_path.write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    try:
        import plots

        made = plots.make_all(summary, results, RESULTS / "plots")
        common.log(f"[run] plots: {', '.join(str(p) for p in made)}")
    except ImportError as exc:
        notes.append(f"plots not made: {exc} (pip install -e '.[bench]')")
    if not args.no_md:
        write_benchmarks_md(summary, command, today, notes, args.quick)
    common.log(f"[run] done in {time.monotonic() - began:.0f} s: {dated}, {summary_path}")
    for note in notes:
        common.log(f"[run] note: {note}")


if __name__ == "__main__":
    main()
