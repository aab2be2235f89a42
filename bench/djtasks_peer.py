"""W1, W2 and one ``.enqueue()``'s latency through django.tasks for a peer backend
(bench/peers/djtasksdb, bench/peers/vtasks, bench/peers/vtasksvk), run inside the peer's
own virtualenv.

W2: recreate the peer's database, migrate, enqueue N no-op tasks (bench/bench_tasks.py) one
``.enqueue()`` each (or the backend's bulk call where it has one; not timed in the
figure), launch the row's worker processes and time from that launch until ``left()``
says no task is left (BENCHMARKS.md, "Rules"). W1: N ``.enqueue()`` calls, then N through
the backend's bulk call where it has one (``enqueue_many``), each from an empty store.
enqueue: N single calls outside and N inside a transaction (bench/enqueue_timing.py).
Prints the contract's JSON line (bench/run.py).
"""

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import common


@dataclass
class Peer:
    """What the shared driver needs from one peer adapter.

    ``name``: the system's name in bench/run.py; ``here``: its folder (the workers' cwd);
    ``dbname``: its PostgreSQL database (dropped and recreated per run); ``workers``:
    variant -> (one argv per worker process, extra environment); ``config``: variant -> one
    line describing the row; ``durable_history`` and ``history``: the row facts
    (common.row_facts); ``left``: tasks not yet done (callable -> int); ``reset``: extra
    clean-up before a run (e.g. FLUSHDB), or None; ``bulk``: True when the backend has
    ``enqueue_many``; ``versions``: package -> version."""

    name: str
    here: Path
    dbname: str
    workers: dict
    config: dict
    durable_history: bool
    history: str
    left: object
    reset: object = None
    bulk: bool = False
    versions: dict = field(default_factory=dict)


def _prepare(peer: Peer) -> None:
    if "django.db" in sys.modules:
        # A second preparation (W1's bulk phase): our own session would be terminated.
        from django.db import connections

        connections.close_all()
    common.pg_recreate_database(peer.dbname)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(peer.here.parent.parent), str(peer.here)])
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    if peer.reset:
        peer.reset()
    sys.path.insert(0, str(peer.here.parent.parent))


def _enqueue(n: int, bulk: bool, chunk: int = 1000) -> float:
    """Enqueue ``n`` no-op tasks; returns seconds."""
    from bench_tasks import noop

    began = time.perf_counter()
    if bulk:
        backend = noop.get_backend()
        for start in range(0, n, chunk):
            backend.enqueue_many([(noop, (i,), {})
                                  for i in range(start, min(n, start + chunk))])
    else:
        for i in range(n):
            noop.enqueue(i)
    return time.perf_counter() - began


def _facts(peer: Peer, variant: str) -> dict:
    return {**common.row_facts(variant, peer.config[variant], peer.durable_history,
                               peer.history),
            "versions": peer.versions, "hardware": common.hardware()}


def w1(peer: Peer, args) -> dict:
    """Single ``.enqueue()`` calls, then ``enqueue_many`` where the backend has it."""
    n = args.n or (2000 if args.quick else 20_000)
    _prepare(peer)
    single = n / _enqueue(n, False)
    bulk = None
    if peer.bulk:
        _prepare(peer)
        bulk = n / _enqueue(n, True)
    details = {"n": n, "single_jobs_per_s": round(single, 1),
               "bulk_jobs_per_s": round(bulk, 1) if bulk else None,
               "bulk_api": "backend.enqueue_many([(task, args, kwargs), ...]), 1,000 per "
                           "call" if peer.bulk else "none: django.tasks has no bulk "
                                                    "enqueue", **_facts(peer, args.variant)}
    return {"workload": "W1", "figure": round(max(single, bulk or 0), 1), "unit": "jobs/s",
            "details": details}


def w2(peer: Peer, args) -> dict:
    """Drain N enqueued no-op tasks with the row's workers, timed from their launch."""
    n = args.n or (2000 if args.quick else 20_000)
    logdir = Path(args.log_dir)
    logdir.mkdir(parents=True, exist_ok=True)
    _prepare(peer)
    enqueue_s = _enqueue(n, peer.bulk)
    cmds, env = peer.workers[args.variant]
    procs = []
    try:
        began = time.monotonic()
        procs = [common.spawn(cmd, env=dict(os.environ, **env), cwd=peer.here,
                              log_path=logdir / f"worker{i}.log")
                 for i, cmd in enumerate(cmds)]
        done = common.wait_until(lambda: peer.left() == 0, args.timeout, 0.05)
        wall = time.monotonic() - began
    finally:
        for proc in procs:
            common.stop(proc, grace_s=10.0)
    details = {"n": n, "enqueue_s": round(enqueue_s, 3), **_facts(peer, args.variant),
               "commands": {"workers": " ; ".join(
                   " ".join([*(f"{k}={v}" for k, v in env.items()), *cmd[1:]])
                   for cmd in cmds)}}
    if not done:
        return {"workload": "W2", "failed": f"{peer.left()} of {n} left after "
                f"{args.timeout} s", "figure": None, "details": details}
    details["wall_s"] = round(wall, 3)
    return {"workload": "W2", "figure": round(n / wall, 1), "unit": "jobs/s",
            "details": details}


def latency(peer: Peer, args) -> dict:
    """One ``.enqueue()`` at a time, outside and inside a transaction, timed as ours is
    (bench/enqueue_timing.py); figure: wall ms per call outside a transaction."""
    import enqueue_timing

    n = args.n or (300 if args.quick else 1000)
    _prepare(peer)
    from bench_tasks import noop

    timed = enqueue_timing.time_enqueues(noop.enqueue, n)
    return {"workload": "enqueue", "figure": timed["outside_wall_ms"], "unit": "ms",
            "details": {"n": n, **timed, "load_1m": round(os.getloadavg()[0], 2),
                        "versions": peer.versions}}


def run(peer: Peer) -> None:
    """Parse the contract's arguments and run W1 or W2 for ``peer``; other workloads are
    reported unsupported (these peers are measured on ingest and drain)."""
    parser = common.base_parser(f"{peer.name} W1/W2 through django.tasks.")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--log-dir", default=f"/tmp/bench-{peer.name}-logs")
    args = parser.parse_args()
    common.install_signal_handlers()
    if args.workload not in ("W1", "W2", "enqueue"):
        common.emit_json({"workload": args.workload, "unsupported":
                          "measured on W1, W2 and enqueue through django.tasks only"})
        return
    try:
        result = {"W1": w1, "W2": w2, "enqueue": latency}[args.workload](peer, args)
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        result = {"workload": args.workload, "figure": None, "failed": repr(exc)}
    finally:
        common.kill_all()
    common.emit_json(result)
