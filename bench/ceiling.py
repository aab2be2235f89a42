"""The ceiling of W2 (issue 6): the same PostgreSQL and Redis writes a W2 run costs us,
done by a bare loop with no framework, to show how close the worker is to this machine's
limit.

    .venv/bin/python bench/ceiling.py [--n N] [--batch B] [--quick]

Setup (not timed) is W2's: bench/ours.py empties bench_ours and Redis db 6 and stores N
one-off noop jobs due now through ``jobs.services.create_jobs`` (a job row, a run row,
a member of the Redis ready set each). Then 2 processes (W2's 2 worker processes), each
with one psycopg connection and one redis-py client, loop until the ready set is empty;
per batch of B runs (default: what one lease call of our worker takes, see --batch):

1. Redis, lease: one EVALSHA of a script doing ZPOPMIN ready B and ZADD leased with the
   expiry (runs/brokers/lua/lease.lua's core, without its isolation policy).
2. PostgreSQL, start (one transaction): ``UPDATE runs_run SET state='running', attempt =
   attempt + 1, worker_id, lease_expires_at, started_at WHERE id = ANY(ids) AND state IN
   (pending) RETURNING id, attempt`` (transitions.start_attempts's fenced UPDATE), then
   the attempt rows by COPY (one per run, outcome 'running').
3. The no-op handler: nothing (no process hop: that is framework cost).
4. PostgreSQL, ack (one transaction): ``UPDATE runs_run SET state='succeeded',
   finished_at, lease_expires_at=NULL, error='' FROM unnest(ids, attempts) WHERE id and
   attempt match AND state='running'`` and ``UPDATE runs_attempt SET finished_at,
   outcome='succeeded'`` matched the same way (transitions.complete's fenced UPDATEs,
   batched).
5. Redis, ack: ZREM of the ids from the leased set, pipelined (Broker._forget).

It leaves out what is not a write: the worker's read of handler and payload, the
clock_timestamp() round trips, the FOR UPDATE re-read of complete(), the pipe to the
child. Figure: N / seconds from the two processes' start until both are done (runs/s).
"""

import argparse
import json
import multiprocessing
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import ours  # noqa: E402  (sets the bench environment: bench_ours, Redis db 6, prefix)

# The essential writes of a lease (runs/brokers/lua/lease.lua as of issue 6's start):
# pop the most urgent ready runs and record them as leased, atomically. The isolation
# policy that script grew since (priority classes, owner and queue limits) is left out.
LEASE_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local popped = redis.call('ZPOPMIN', KEYS[1], tonumber(ARGV[1]))
local ids = {}
for i = 1, #popped, 2 do
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), popped[i])
  ids[#ids + 1] = popped[i]
end
return ids
"""
READY = f"{ours.PREFIX}:{{default:0}}:ready"
LEASED = f"{ours.PREFIX}:{{default:0}}:leased"
WORKER_ID = "ceiling"


def drain(batch: int, counts) -> None:
    """One process of the ceiling: lease, start, ack batches until nothing is ready."""
    import psycopg
    import redis

    client = redis.Redis.from_url(ours.ENV["REDIS_URL"])
    lease = client.register_script(LEASE_LUA)
    conn = psycopg.connect(ours.ENV["DATABASE_URL"])
    done = -1
    try:
        done = _loop(client, lease, conn, batch)
    finally:
        counts.put(done)
        conn.close()


def _loop(client, lease, conn, batch: int) -> int:
    done = 0
    while True:
        ids = [int(i) for i in lease(keys=[READY, LEASED], args=[batch, 60_000])]
        if not ids:
            break
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(
                "UPDATE runs_run SET state = 'running', attempt = attempt + 1, "
                "worker_id = %s, lease_expires_at = now() + interval '60 s', "
                "started_at = now() WHERE id = ANY(%s) "
                "AND state IN ('scheduled', 'queued', 'retrying') RETURNING id, attempt",
                [WORKER_ID, ids])
            leased = cur.fetchall()
            now = datetime.now(UTC)
            with cur.copy("COPY runs_attempt (run_id, number, worker_id, started_at, "
                          "outcome, error) FROM STDIN") as copy:
                for run_id, attempt in leased:
                    copy.write_row((run_id, attempt, WORKER_ID, now, "running", ""))
        run_ids = [r[0] for r in leased]
        attempts = [r[1] for r in leased]
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(
                "UPDATE runs_run r SET state = 'succeeded', finished_at = now(), "
                "lease_expires_at = NULL, error = '' "
                "FROM unnest(%s::bigint[], %s::int[]) AS a(id, attempt) "
                "WHERE r.id = a.id AND r.attempt = a.attempt AND r.state = 'running'",
                [run_ids, attempts])
            cur.execute(
                "UPDATE runs_attempt t SET finished_at = now(), outcome = 'succeeded' "
                "FROM unnest(%s::bigint[], %s::int[]) AS a(id, attempt) "
                "WHERE t.run_id = a.id AND t.number = a.attempt",
                [run_ids, attempts])
        pipe = client.pipeline(transaction=False)
        pipe.zrem(LEASED, *ids)
        pipe.execute()
        done += len(run_ids)
    return done


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
    procs = [multiprocessing.Process(target=drain, args=(batch, counts))
             for _ in range(args.processes)]
    began = time.perf_counter()
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    wall = time.perf_counter() - began
    done = sum(counts.get() for _ in procs)
    succeeded = ours.count_succeeded()
    details = {"n": n, "done": done, "succeeded_rows": succeeded, "batch": batch,
               "processes": args.processes, "wall_s": round(wall, 3),
               "what": "per batch: lease.lua EVALSHA; UPDATE runs RETURNING + COPY attempts "
                       "(1 txn); UPDATE runs + UPDATE attempts from unnest (1 txn); "
                       "pipelined ZREM (bench/ceiling.py docstring)",
               "versions": ours.versions()}
    print(json.dumps({"workload": "ceiling", "figure": round(done / wall, 1),
                      "unit": "runs/s", "details": details}), flush=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
