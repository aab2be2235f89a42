"""W7 for Celery: its canvas at the documented defaults and at its tuning for many short
tasks (BENCHMARKS.md, "W7"; the shapes and figures are bench/w7shapes.py's).

Run with the celery venv: bench/.venvs/celery/bin/python bench/peers/celery/canvas.py
fan|chain|map [--variant default|tuned] (bench/workflows.py does, in interleaved pairs
with ours). Also the Celery app of the workers it starts (VARIANTS below): a Celery app
with nothing set but its broker (Redis db 1) and, because a chord needs one, a result
backend, Redis db 2, as Celery's docs on chords show; everything else is Celery's
default (prefork pool, early acknowledgement, prefetch multiplier 4, results kept)
unless the tuned row's command line sets it. ``fan`` is ``chain(root,
chord([998 x stamp], sink))``, ``chain`` is ``chain(100 x stamp)``, all immutable
signatures (``.si()``) with task ids of our choosing, so each node's result (its
handler's start, Unix seconds) is read from the backend by node name afterwards.

``map``, a fan-out sized by a result, is ``chain(root, each)``: ``root`` returns a list
of MAP_ITEMS, and ``each`` receives it and replaces itself by ``chord(group(item.s(x)
for x in items), sink.s())`` (``Task.replace``: "Replace this task, with a new task
inheriting the task id", Celery's reference for celery.app.task), so the sink gets the
items' results in item order and its result is the chain's (``each``'s task id).
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # bench/ for common, w7shapes

import common  # noqa: E402
import w7shapes  # noqa: E402
from celery import Celery, chain, chord, group  # noqa: E402

PORT = os.environ.get("BENCH_REDIS_PORT", "6379")
BROKER_DB, BACKEND_DB = 1, 2
app = Celery("canvas", broker=f"redis://127.0.0.1:{PORT}/{BROKER_DB}",
             backend=f"redis://127.0.0.1:{PORT}/{BACKEND_DB}")
LOG = f"/tmp/bench-celery-w7-{os.getpid()}.log"
CELERY = os.path.join(os.path.dirname(sys.executable), "celery")
WORKER = [CELERY, "-A", "canvas", "worker"]
# Two OS processes run the tasks in each row (BENCHMARKS.md, "Rules"), as in W2's rows
# (bench/peers/celery/bench.py).
# default: the prefork pool of 2 children, Celery's defaults; "-l info" only to see the
#   worker's "ready." line (it also logs two lines per task).
# tuned: the "Optimizing" guide's advice for many short tasks, a high prefetch
#   multiplier (https://docs.celeryq.dev/en/stable/userguide/optimizing.html#prefetch-limits),
#   with early acknowledgement kept (task_acks_late off, Celery's default), in two
#   solo-pool workers, which run tasks in the worker process itself with no pool IPC per
#   task (https://docs.celeryq.dev/en/stable/internals/reference/celery.concurrency.solo.html),
#   without the worker-to-worker event traffic and start-up sync two workers would
#   otherwise have (--without-gossip, --without-mingle, --without-heartbeat:
#   https://docs.celeryq.dev/en/stable/reference/cli.html#celery-worker), at the default
#   log level; ready when both answer a ping. The result backend stays Redis: with it a
#   chord counts its header's results in Redis instead of a chord_unlock task polling
#   them every second (https://docs.celeryq.dev/en/stable/userguide/canvas.html#chords,
#   "Important Notes").
VARIANTS = {
    "default": [WORKER + ["-c", "2", "-l", "info"]],
    "tuned": [WORKER + ["-P", "solo", "--prefetch-multiplier", "64", "--without-gossip",
                        "--without-mingle", "--without-heartbeat", "-n", f"w7-{i}@%h"]
              for i in (1, 2)],
}
SETUP = {
    "default": "Celery defaults (prefork -c 2, acks early, prefetch multiplier 4)",
    "tuned": "2 x solo worker, prefetch multiplier 64, acks early, without gossip, "
             "mingle and heartbeat, default log level",
}
TIMEOUT_S = 300


@app.task(name="w7.stamp")
def stamp():
    """A no-op node: returns its start (Unix seconds), kept by the result backend."""
    return time.time()


@app.task(name="w7.root")
def root():
    """``map``'s root: a list of MAP_ITEMS, each its start (as our bench.stamp's)."""
    return [time.time()] * w7shapes.MAP_ITEMS


@app.task(name="w7.item")
def item(value):
    """One mapped item: returns its start."""
    return time.time()


@app.task(name="w7.sink")
def sink(results):
    """``map``'s join: its start and the items' results, in item order."""
    return [time.time(), results]


@app.task(bind=True, name="w7.each")
def each(self, items):
    """The fan-out sized by ``root``'s list: replaced by a chord over it."""
    header = group(item.s(x).set(task_id=f"w7-n{i}") for i, x in enumerate(items))
    return self.replace(chord(header, sink.s()))


def canvas(name: str):
    """(signature, node names in order, edges, the task id holding the last node's
    result) of W7 shape ``name``."""
    nodes, edges = w7shapes.shape(name)
    if name == "map":
        sig = chain(root.si().set(task_id="w7-root"), each.s().set(task_id="w7-each"))
        return sig, nodes, edges, "w7-each"
    sig = {n: stamp.si().set(task_id=f"w7-{n}") for n in nodes}
    if name == "fan":
        middle = nodes[1:-1]
        return (chain(sig["root"], chord([sig[m] for m in middle], sig["sink"])), nodes,
                edges, f"w7-{nodes[-1]}")
    return chain(*[sig[n] for n in nodes]), nodes, edges, f"w7-{nodes[-1]}"


def wait_ready(procs, variant: str) -> None:
    """Block until every worker of ``procs`` serves: the default row's logs its
    "ready." line; the tuned rows', at the default log level, answer a ping."""
    def ready():
        for proc in procs:
            if proc.poll() is not None:
                raise RuntimeError(f"celery exited with {proc.returncode}; see {LOG}")
        if variant == "tuned":
            return len(app.control.ping(timeout=0.5)) >= len(procs)
        with open(LOG, errors="replace") as fh:
            return fh.read().count(" ready.") >= len(procs)
    if not common.wait_until(ready, 90, 0.1):
        raise RuntimeError(f"the workers were not ready after 90 s; see {LOG}")


def node_starts(name: str, nodes: list[str], last_id: str) -> dict[str, float]:
    """Each node's handler start, from the backend; for ``map`` the root's list holds its
    start and the sink's result its own and the items' results, checked in item order."""
    get = lambda task_id: app.AsyncResult(task_id).get(timeout=10)  # noqa: E731
    if name != "map":
        return {n: get(f"w7-{n}") for n in nodes}
    starts = {"root": get("w7-root")[0]}
    starts.update({n: get(f"w7-{n}") for n in nodes[1:-1]})
    starts["sink"], results = get(last_id)
    if results != [starts[n] for n in nodes[1:-1]]:
        raise RuntimeError("the sink did not get the items' results in item order")
    return starts


def run(name: str, variant: str = "default") -> dict:
    """One timed canvas of shape ``name`` on fresh workers of ``variant`` (VARIANTS);
    returns the result."""
    from importlib.metadata import version

    system = "celery" if variant == "default" else f"celery-{variant}"
    common.redis_flushdb(BROKER_DB)
    common.redis_flushdb(BACKEND_DB)
    workers = [common.spawn(cmd, cwd=HERE, log_path=LOG) for cmd in VARIANTS[variant]]
    try:
        wait_ready(workers, variant)
        chain(*[stamp.si() for _ in range(5)]).apply_async().get(timeout=TIMEOUT_S)
        sig, nodes, edges, last_id = canvas(name)
        last = app.AsyncResult(last_id)
        cpu_before = [w7shapes.group_cpu_s(w.pid) for w in workers]
        t0 = time.time()
        began = time.perf_counter()
        sig.apply_async()
        start_call_s = time.perf_counter() - began
        # As slow a poll as ours (bench/workflows.py): the figures are the nodes' own.
        done = common.wait_until(last.ready, TIMEOUT_S, 0.1)
        seen_s = time.time() - t0
        cpu = {f"worker{i + 1}": round(w7shapes.group_cpu_s(w.pid) - before, 2)
               for i, (w, before) in enumerate(zip(workers, cpu_before, strict=True))}
    finally:
        for worker in workers:
            common.stop(worker)
    if not done:
        return {"system": system, "shape": name, "failed": f"not done in {TIMEOUT_S} s"}
    starts = node_starts(name, nodes, last_id)
    return {
        "system": system, "shape": name, "nodes": len(nodes), "edges": len(edges),
        "makespan_s": round(starts[nodes[-1]] - t0, 3), "seen_s": round(seen_s, 3),
        "start_call_s": round(start_call_s, 3),
        "handoff": w7shapes.figures(starts, starts, edges, name), "cpu_s": cpu,
        "commands": {f"worker{i + 1}": " ".join(["celery", *cmd[1:]])
                     for i, cmd in enumerate(VARIANTS[variant])},
        "versions": {p: version(p) for p in ("celery", "kombu", "redis")},
        "setup": f"{SETUP[variant]}; broker Redis db {BROKER_DB}, result backend Redis "
                 f"db {BACKEND_DB}",
    }


if __name__ == "__main__":
    common.install_signal_handlers()
    chosen = sys.argv[sys.argv.index("--variant") + 1] if "--variant" in sys.argv else "default"
    common.emit_json(run(sys.argv[1], chosen))
