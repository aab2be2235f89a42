"""The ceiling of W2 (BENCHMARKS.md): the same PostgreSQL and Redis writes a W2 run costs us,
done by a bare loop with no framework, to show how close the worker is to this machine's
limit.

    .venv/bin/python bench/ceiling.py [--n N] [--batch B] [--quick]

Setup (not timed) is W2's: bench/ours.py empties bench_ours and Redis db 6 and stores N
one-off noop jobs due now through ``jobs.services.create_jobs`` (a job row, a run row,
a member of the Redis ready set each). Then 2 processes (W2's 2 worker processes), each
with one psycopg connection and one redis-py client, loop until the ready set is empty;
per batch of B runs (default: what one lease call of our worker takes, see --batch):

1. Redis, lease: one EVALSHA of a script doing ZPOPMIN ready B and ZADD leased with the
   expiry (runs/brokers/redis/lua/lease.lua's core, without its isolation policy).
2. PostgreSQL, start (one transaction): ``UPDATE runs_run SET state='running', attempt =
   attempt + 1, worker_id, lease_expires_at, started_at WHERE id = ANY(ids) AND state IN
   (pending) RETURNING id, attempt`` (runs/execution/leases.py's fenced UPDATE), then
   the attempt rows by COPY (one per run, outcome 'running').
3. The no-op handler: nothing (no process hop: that is framework cost).
4. PostgreSQL, ack (one transaction): ``UPDATE runs_run SET state='succeeded',
   finished_at, lease_expires_at=NULL, error='' FROM unnest(ids, attempts) WHERE id and
   attempt match AND state='running'`` and ``UPDATE runs_attempt SET finished_at,
   outcome='succeeded'`` matched the same way (completion.complete's fenced UPDATEs,
   batched).
5. Redis, ack: ZREM of the ids from the leased set, pipelined (Broker._forget).

It leaves out what is not a write: the worker's read of handler and payload, the
clock_timestamp() round trips, the FOR UPDATE re-read of complete(), the pipe to the
child. The loop is bench/bare_loop.py. Two figures:

* warm (``figure``): the 2 processes forked from this one, with psycopg and redis-py
  already imported: N / seconds from their start until both are done (runs/s). Hold W2's
  drain (first lease to last ack, no start-up) against it.
* cold (``details.cold_runs_per_s``): the same N runs again (reloaded, not timed), drained
  by 2 fresh interpreters running bench/bare_loop.py, timed from their launch, as W2
  times our worker from its launch. Hold W2's figure against it: both include starting
  Python and loading the client libraries; ours also loads Django and forks children.
"""

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import bare_loop  # noqa: E402
import ours  # noqa: E402  (sets the bench environment: bench_ours, Redis db 6, prefix)

READY = f"{ours.PREFIX}:{{default:0}}:ready"
LEASED = f"{ours.PREFIX}:{{default:0}}:leased"


def warm_drain(batch: int, counts) -> None:
    """One process of the warm ceiling (forked from this one, everything imported)."""
    done = -1
    try:
        done = bare_loop.drain(ours.ENV["DATABASE_URL"], ours.ENV["REDIS_URL"], READY, LEASED,
                               batch)
    finally:
        counts.put(done)


def cold_drain(batch: int, processes: int) -> tuple[int, float]:
    """The same loop in ``processes`` fresh interpreters (bench/bare_loop.py), timed from
    their launch: (runs finished, seconds)."""
    cmd = [sys.executable, str(BENCH / "bare_loop.py"), "--db", ours.ENV["DATABASE_URL"],
           "--redis", ours.ENV["REDIS_URL"], "--ready", READY, "--leased", LEASED,
           "--batch", str(batch)]
    began = time.perf_counter()
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
             for _ in range(processes)]
    outs = [p.communicate()[0] for p in procs]
    wall = time.perf_counter() - began
    return sum(int(out.strip() or -1) for out in outs), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=None)
    parser.add_argument("--batch", type=int, default=None,
                        help="runs per lease/ack (default: our worker's lease batch)")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n = args.n or (2000 if args.quick else 20_000)
    ours._ensure_database()
    ours._setup_django()
    from runs import worker

    # Our worker's runs per lease call with --concurrency 2 (the slots it can fill).
    batch = args.batch or getattr(worker, "lease_batch", lambda concurrency: concurrency)(2)
    ours.reset()
    ours.create_jobs(n, handler="noop", run_at=datetime.now(UTC))
    from django.db import connections

    connections.close_all()
    counts = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=warm_drain, args=(batch, counts))
             for _ in range(args.processes)]
    began = time.perf_counter()
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    wall = time.perf_counter() - began
    done = sum(counts.get() for _ in procs)
    succeeded = ours.count_succeeded()
    # Cold: the same writes of the same N runs again, from fresh interpreters.
    ours.reset()
    ours.create_jobs(n, handler="noop", run_at=datetime.now(UTC))
    connections.close_all()
    cold_done, cold_wall = cold_drain(batch, args.processes)
    details = {"n": n, "done": done, "succeeded_rows": succeeded, "batch": batch,
               "processes": args.processes, "wall_s": round(wall, 3),
               "cold_done": cold_done, "cold_wall_s": round(cold_wall, 3),
               "cold_runs_per_s": round(cold_done / cold_wall, 1),
               "cold_succeeded_rows": ours.count_succeeded(),
               "what": "per batch: lease.lua EVALSHA; UPDATE runs RETURNING + COPY attempts "
                       "(1 txn); UPDATE runs + UPDATE attempts from unnest (1 txn); "
                       "pipelined ZREM (bench/ceiling.py docstring)",
               "versions": ours.versions()}
    print(json.dumps({"workload": "ceiling", "figure": round(done / wall, 1),
                      "unit": "runs/s", "details": details}), flush=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
