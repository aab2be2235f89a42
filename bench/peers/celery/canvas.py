"""W7 for Celery: its canvas at the documented defaults (BENCHMARKS.md, "W7"; the shapes
and figures are bench/w7shapes.py's).

Run with the celery venv: bench/.venvs/celery/bin/python bench/peers/celery/canvas.py fan|chain
(bench/workflows.py does, in interleaved pairs with ours). Also the Celery app of the
worker it starts (``celery -A canvas worker -c 2``): a Celery app with nothing set but
its broker (Redis db 1) and, because a chord needs one, a result backend, Redis db 2, as
Celery's docs on chords show; everything else is Celery's default (prefork pool, early
acknowledgement, prefetch multiplier 4, results kept). ``fan`` is ``chain(root,
chord([998 x stamp], sink))``, ``chain`` is ``chain(100 x stamp)``, all immutable
signatures (``.si()``) with task ids of our choosing, so each node's result (its
handler's start, Unix seconds) is read from the backend by node name afterwards.
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # bench/ for common, w7shapes

import common  # noqa: E402
import w7shapes  # noqa: E402
from celery import Celery, chain, chord  # noqa: E402

PORT = os.environ.get("BENCH_REDIS_PORT", "6379")
BROKER_DB, BACKEND_DB = 1, 2
app = Celery("canvas", broker=f"redis://127.0.0.1:{PORT}/{BROKER_DB}",
             backend=f"redis://127.0.0.1:{PORT}/{BACKEND_DB}")
LOG = f"/tmp/bench-celery-w7-{os.getpid()}.log"
CELERY = os.path.join(os.path.dirname(sys.executable), "celery")
WORKER_CMD = [CELERY, "-A", "canvas", "worker", "-c", "2", "-l", "info"]
TIMEOUT_S = 300


@app.task(name="w7.stamp")
def stamp():
    """A no-op node: returns its start (Unix seconds), kept by the result backend."""
    return time.time()


def canvas(name: str):
    """(signature, node names in order, edges) of W7 shape ``name``."""
    nodes, edges = w7shapes.shape(name)
    sig = {n: stamp.si().set(task_id=f"w7-{n}") for n in nodes}
    if name == "fan":
        middle = nodes[1:-1]
        return chain(sig["root"], chord([sig[m] for m in middle], sig["sink"])), nodes, edges
    return chain(*[sig[n] for n in nodes]), nodes, edges


def wait_ready(proc) -> None:
    def ready():
        if proc.poll() is not None:
            raise RuntimeError(f"celery exited with {proc.returncode}; see {LOG}")
        with open(LOG, errors="replace") as fh:
            return " ready." in fh.read()
    if not common.wait_until(ready, 90, 0.1):
        raise RuntimeError(f"the worker was not ready after 90 s; see {LOG}")


def run(name: str) -> dict:
    """One timed canvas of shape ``name`` on a fresh worker; returns the result."""
    from importlib.metadata import version

    common.redis_flushdb(BROKER_DB)
    common.redis_flushdb(BACKEND_DB)
    worker = common.spawn(WORKER_CMD, cwd=HERE, log_path=LOG)
    try:
        wait_ready(worker)
        chain(*[stamp.si() for _ in range(5)]).apply_async().get(timeout=TIMEOUT_S)
        sig, nodes, edges = canvas(name)
        last = app.AsyncResult(f"w7-{nodes[-1]}")
        cpu_before = w7shapes.group_cpu_s(worker.pid)
        t0 = time.time()
        began = time.perf_counter()
        sig.apply_async()
        start_call_s = time.perf_counter() - began
        # As slow a poll as ours (bench/workflows.py): the figures are the nodes' own.
        done = common.wait_until(last.ready, TIMEOUT_S, 0.1)
        seen_s = time.time() - t0
        cpu = {"worker": round(w7shapes.group_cpu_s(worker.pid) - cpu_before, 2)}
    finally:
        common.stop(worker)
    if not done:
        return {"system": "celery", "shape": name, "failed": f"not done in {TIMEOUT_S} s"}
    starts = {n: app.AsyncResult(f"w7-{n}").get(timeout=10) for n in nodes}
    return {
        "system": "celery", "shape": name, "nodes": len(nodes), "edges": len(edges),
        "makespan_s": round(starts[nodes[-1]] - t0, 3), "seen_s": round(seen_s, 3),
        "start_call_s": round(start_call_s, 3),
        "handoff": w7shapes.figures(starts, starts, edges, name), "cpu_s": cpu,
        "commands": {"worker": " ".join(["celery", *WORKER_CMD[1:]])},
        "versions": {p: version(p) for p in ("celery", "kombu", "redis")},
        "setup": "Celery defaults (prefork, acks early, prefetch multiplier 4); broker "
                 f"Redis db {BROKER_DB}, result backend Redis db {BACKEND_DB}",
    }


if __name__ == "__main__":
    common.install_signal_handlers()
    common.emit_json(run(sys.argv[1]))
