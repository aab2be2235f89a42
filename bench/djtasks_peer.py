"""W2 through django.tasks for a peer backend (bench/peers/djtasksdb, bench/peers/vtasks),
run inside the peer's own virtualenv: recreate its database, migrate, enqueue N no-op tasks
(bench/bench_tasks.py) one ``.enqueue()`` each (not timed in the figure), launch the peer's
worker processes at their defaults, and time from that launch until ``left()`` says no
task is left (BENCHMARKS.md, "django.tasks"). Prints the contract's JSON line (bench/run.py).
"""

import os
import sys
import time
from pathlib import Path

import common


def run(peer: str, here: Path, dbname: str, worker_cmds: list[list[str]], left,
        describe: dict) -> None:
    """Parse the contract's arguments and run W2 for ``peer``. ``worker_cmds``: one argv
    per worker process, run in ``here``; ``left()``: tasks not yet succeeded (int);
    ``describe``: commands, versions and setup for the details."""
    parser = common.base_parser(f"{peer} W2 through django.tasks.")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--log-dir", default=f"/tmp/bench-{peer}-logs")
    args = parser.parse_args()
    logdir = Path(args.log_dir)
    logdir.mkdir(parents=True, exist_ok=True)
    if args.workload != "W2":
        common.emit_json({"workload": args.workload,
                          "unsupported": "measured on W2 through django.tasks only"})
        return
    common.install_signal_handlers()
    n = args.n or (2000 if args.quick else 20_000)
    common.pg_recreate_database(dbname)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(here.parent.parent), str(here)])
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    sys.path.insert(0, str(here.parent.parent))
    from bench_tasks import noop

    began = time.perf_counter()
    for i in range(n):
        noop.enqueue(i)
    enqueue_s = time.perf_counter() - began
    procs = []
    try:
        began = time.monotonic()
        procs = [common.spawn(cmd, env=dict(os.environ), cwd=here,
                              log_path=logdir / f"worker{i}.log")
                 for i, cmd in enumerate(worker_cmds)]
        done = common.wait_until(lambda: left() == 0, args.timeout, 0.05)
        wall = time.monotonic() - began
    finally:
        for proc in procs:
            common.stop(proc, grace_s=10.0)
    if not done:
        common.emit_json({"workload": "W2", "failed": f"{left()} of {n} left after "
                          f"{args.timeout} s", "figure": None})
        return
    common.emit_json({"workload": "W2", "figure": round(n / wall, 1), "unit": "jobs/s",
                      "details": {"n": n, "wall_s": round(wall, 3),
                                  "enqueue_s": round(enqueue_s, 3),
                                  "enqueue_per_s": round(n / enqueue_s, 1), **describe}})
