"""W7: workflows of no-op nodes, ours beside Celery's canvas at its defaults and tuned
(BENCHMARKS.md, "W7").

    .venv/bin/python bench/workflows.py [--pairs 3] [--shapes fan,chain]
        [--only ours,celery,celery-tuned]
    .venv/bin/python bench/workflows.py --pairs 3 --shapes map \
        --out bench/results/workflows-map.json
    .venv/bin/python bench/workflows.py --run ours fan      # one run, one JSON line

Shapes (bench/w7shapes.py): ``fan``, 1 root -> 998 parallel nodes -> 1 sink (1,000 nodes,
our WORKFLOW_MAX_NODES; Celery: ``chain(root, chord(998, sink))``), and ``chain``, 100
nodes one after the other, and ``map``, a fan-out sized by a result: 1 root -> 1 node
mapped over its list of 1,000 -> 1 sink (Celery: ``chain(root, each)``, where ``each``
receives the list and replaces itself, ``Task.replace``, by a chord of one task per
item with the sink as its body; BENCH_W7_MAP_ITEMS=20 makes a smoke run). Each run
starts the system's daemons, waits until they serve, runs a warm-up workflow (a chain
of 5), then times one workflow of the shape, stops the daemons and prints one JSON line.
The driver runs them in interleaved rounds (ours, Celery, Celery tuned in rounds 1,
3, ...; the reverse in 2, 4, ...), each run in a subprocess with its own interpreter, the
1-minute load average read before and after each, and writes bench/results/workflows.json.

Figures of a run: ``makespan_s``, from just before the start call (our
``start_workflow_run``, Celery's ``apply_async``) to the sink's (the chain's last node's)
handler start; handoffs (w7shapes.figures), the time from an upstream's handler start to
its downstream's (every node is a no-op, so that is its end as well); for ours also the
same from the database: the upstream's succeeded attempt ``finished_at`` (its ack) to the
downstream's first attempt ``started_at`` (its lease); and the CPU seconds every process
of each system (its process groups, from /proc) spent from the start call until the end
was seen (our start call runs in this process and is not counted: ``start_call_s``).

Our side: ``runscheduler``, ``rundispatcher`` and ``runworker --concurrency 2`` as
bench/ours.py starts them (database ``bench_w7``, Redis db 6 under key prefix ``w7``),
nodes of the ``bench.stamp`` handler (bench/ours.py: returns its start time). Celery's
side: bench/peers/celery/canvas.py in Celery's virtualenv, ``celery`` at its defaults and
``celery-tuned`` with its documented tuning for many short tasks (canvas.VARIANTS, whose
comment cites the docs).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("BENCH_OURS_DB", "bench_w7")
os.environ.setdefault("BENCH_OURS_PREFIX", "w7")

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT))

import common  # noqa: E402
import harness  # noqa: E402
import w7shapes  # noqa: E402

RESULTS = BENCH / "results" / "workflows.json"
WORKFLOW_TABLES = ["workflows_mapitem", "workflows_noderun", "workflows_workflowrun",
                   "workflows_workflowedge", "workflows_workflownode", "workflows_workflow"]
# The figures come from the nodes' own timestamps, not from this poll: it only says when
# to read them, so it is kept slow enough to cost the daemons next to nothing.
POLL_S = 0.1


def _node(name: str) -> dict:
    return {"name": name, "handler": "bench.stamp", "payload": {}, "max_attempts": 3}


def _wait_ended(workflow_run_id: int, timeout: float) -> str | None:
    from workflows.models import WorkflowRun

    def ended():
        state = WorkflowRun.objects.filter(pk=workflow_run_id).values_list(
            "state", flat=True).first()
        return state if state not in ("running", "paused") else None
    return common.wait_until(ended, timeout, POLL_S)


def run_ours(name: str, log_dir: Path, timeout: float) -> dict:
    """One timed workflow run of shape ``name`` on our daemons; returns the result."""
    import ours
    from django.db import connection

    from workflows import services
    from workflows.models import MapItem, NodeRun, WorkflowRun

    ours.reset()
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {', '.join(WORKFLOW_TABLES)} RESTART IDENTITY CASCADE")
    nodes, edges = w7shapes.shape(name)
    made = time.perf_counter()
    if name == "map":  # root -> each (mapped over root's list) -> sink
        workflow = services.create_workflow(f"w7 {name}", [
            {**_node("root"), "payload": {"items": w7shapes.MAP_ITEMS}},
            {**_node("each"), "map": "root"}, _node("sink")], [("each", "sink")])
    else:
        workflow = services.create_workflow(f"w7 {name}", [_node(n) for n in nodes], edges)
    warm = services.create_workflow("w7 warm-up", [_node(f"w{i}") for i in range(5)],
                                    [(f"w{i}", f"w{i + 1}") for i in range(4)])
    create_s = time.perf_counter() - made
    ours.analyze()
    daemons = ours.Daemons(log_dir)
    try:
        daemons.start("scheduler", "runscheduler")
        daemons.start("dispatcher", "rundispatcher")
        daemons.start("worker", *ours.WORKER_ARGS)
        if not (ours.wait_worker_ready() and ours.wait_dispatcher_ready()):
            return {"system": "ours", "shape": name, "failed": "daemons not ready in 30 s"}
        warm_run = services.start_workflow_run(warm)
        if _wait_ended(warm_run.pk, timeout) != "succeeded":
            return {"system": "ours", "shape": name, "failed": "the warm-up did not succeed"}
        names = ("scheduler", "dispatcher", "worker")
        cpu_before = [w7shapes.group_cpu_s(p.pid) for p in daemons.procs]
        t0 = time.time()
        began = time.perf_counter()
        workflow_run = services.start_workflow_run(workflow)
        start_call_s = time.perf_counter() - began
        state = _wait_ended(workflow_run.pk, timeout)
        seen_s = time.time() - t0
        cpu = {n: round(w7shapes.group_cpu_s(p.pid) - before, 2)
               for n, p, before in zip(names, daemons.procs, cpu_before, strict=True)}
    finally:
        daemons.stop()
    if state != "succeeded":
        return {"system": "ours", "shape": name, "failed": f"workflow run ended {state}"}
    node_runs = dict(NodeRun.objects.filter(workflow_run=workflow_run, run_id__isnull=False)
                     .values_list("node__name", "run_id"))
    node_runs.update({f"n{index}": run for index, run in MapItem.objects.filter(
        node_run__workflow_run=workflow_run).values_list("index", "run_id")})
    starts, db_start, db_end = _times(node_runs)
    wr = WorkflowRun.objects.get(pk=workflow_run.pk)
    last = nodes[-1]
    return {
        "system": "ours", "shape": name, "nodes": len(nodes), "edges": len(edges),
        "makespan_s": round(starts[last] - t0, 3),
        "finished_s": round(wr.finished_at.timestamp() - t0, 3),
        "seen_s": round(seen_s, 3), "start_call_s": round(start_call_s, 3),
        "handoff": w7shapes.figures(starts, starts, edges, name),
        "handoff_db": w7shapes.figures(db_start, db_end, edges, name),
        "cpu_s": cpu, "create_workflow_s": round(create_s, 3),
        "commands": daemons.describe(),
    }


def _times(node_runs: dict[str, int]):
    """Per node name: handler start (the run's result), and from the database its first
    attempt's started_at and its succeeded attempt's finished_at (Unix seconds)."""
    from runs.models import Attempt, AttemptOutcome, Run

    by_run = {run: name for name, run in node_runs.items()}
    # A list (the map shape's root) holds its start in each item.
    starts = {by_run[r]: result[0] if isinstance(result, list) else result["t"] for r, result
              in Run.objects.filter(pk__in=list(by_run)).values_list("pk", "result")}
    db_start = {by_run[r]: at.timestamp() for r, at in Attempt.objects.filter(
        run_id__in=list(by_run), number=1).values_list("run_id", "started_at")}
    db_end = {by_run[r]: at.timestamp() for r, at in Attempt.objects.filter(
        run_id__in=list(by_run), outcome=AttemptOutcome.SUCCEEDED).values_list(
        "run_id", "finished_at")}
    return starts, db_start, db_end


# --- the driver ------------------------------------------------------------------------


def one_run(system: str, name: str, log_dir: Path, celery_python: Path | None) -> dict:
    """One run in a subprocess (ours with this interpreter, ``celery`` and
    ``celery-tuned`` with ``celery_python``, its virtualenv's), with the load before and
    after."""
    if system == "ours":
        cmd = [sys.executable, str(Path(__file__).resolve()), "--run", "ours", name]
    else:
        variant = "tuned" if system == "celery-tuned" else "default"
        cmd = [str(celery_python), str(BENCH / "peers" / "celery" / "canvas.py"), name,
               "--variant", variant]
    load = os.getloadavg()[0]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT)
    (log_dir / f"{system}-{name}.stderr").write_text(proc.stderr)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else {
        "system": system, "shape": name, "failed": f"exit {proc.returncode}, no result; "
                                                   f"see {log_dir}"}
    result["load_1m"] = [round(load, 2), round(os.getloadavg()[0], 2)]
    common.log(f"[w7] {system} {name}: makespan {result.get('makespan_s')} s, handoff "
               f"{result.get('handoff')}, load {result['load_1m']}"
               + (f" FAILED {result['failed']}" if result.get("failed") else ""))
    return result


def summarise(runs: list[dict]) -> dict:
    """Per shape and system: the median and range of each figure over the runs."""
    keys = {"makespan_s": ("makespan_s",), "handoff_p50_ms": ("handoff", "p50_ms"),
            "handoff_p99_ms": ("handoff", "p99_ms"), "db_p50_ms": ("handoff_db", "p50_ms"),
            "db_p99_ms": ("handoff_db", "p99_ms"),
            "first_fan_out_ms": ("handoff", "first_fan_out_ms"),
            "fan_out_p50_ms": ("handoff", "fan_out_p50_ms"),
            "fan_out_p99_ms": ("handoff", "fan_out_p99_ms"),
            "fan_in_ms": ("handoff", "fan_in_ms"), "db_fan_in_ms": ("handoff_db", "fan_in_ms"),
            "db_first_fan_out_ms": ("handoff_db", "first_fan_out_ms")}
    out: dict = {}
    for run in runs:
        if run.get("failed"):
            continue
        cell = out.setdefault(run["shape"], {}).setdefault(run["system"], {})
        for key, path in keys.items():
            value = run
            for part in path:
                value = value.get(part) if isinstance(value, dict) else None
            if value is not None:
                cell.setdefault(key, []).append(value)
        cell.setdefault("cpu_s", []).append(round(sum(run.get("cpu_s", {}).values()), 2))
        cell.setdefault("load_1m", []).extend(run["load_1m"])
    for shape in out.values():
        for cell in shape.values():
            for key, values in list(cell.items()):
                cell[key] = {"median": round(statistics.median(values), 3),
                             "min": min(values), "max": max(values), "n": len(values)}
    return out


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--run":
        common.install_signal_handlers()
        import ours

        ours._ensure_database()
        ours._setup_django()
        log_dir = Path(os.environ.get("BENCH_W7_LOGS", "/tmp/bench-w7-logs"))
        log_dir.mkdir(parents=True, exist_ok=True)
        common.emit_json(run_ours(sys.argv[3], log_dir, timeout=300))
        return
    parser = argparse.ArgumentParser(description="W7: workflows, ours beside Celery's canvas")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--shapes", default="fan,chain")
    parser.add_argument("--only", default="ours,celery,celery-tuned")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    systems = args.only.split(",")
    log_dir = Path(os.environ.get("BENCH_W7_LOGS", "/tmp/bench-w7-logs"))
    log_dir.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    # Built (or brought to its pins) before the first pair, as bench/run.py does, so a
    # clean checkout runs this script alone and no install lands inside a timed pair.
    celery_python = (harness.ensure_venv("celery", notes)
                     if any(s.startswith("celery") for s in systems) else None)
    runs = []
    for pair in range(args.pairs):
        order = systems if pair % 2 == 0 else systems[::-1]
        for name in args.shapes.split(","):
            for system in order:
                runs.append({"pair": pair + 1,
                             **one_run(system, name, log_dir, celery_python)})
    report = {"workload": "W7", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "hardware": common.hardware(), "pairs": args.pairs, "notes": notes,
              "summary": summarise(runs), "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    common.log(json.dumps(report["summary"], indent=1))


if __name__ == "__main__":
    main()
