"""RQ adapter for bench/run.py (the adapter contract is in bench/run.py's docstring).

Run with the rq venv:
    bench/.venvs/rq/bin/python bench/peers/rq/bench.py W2 [--variant default|tuned]
Redis db 2 only: RQ keeps jobs and results in Redis (it has no database backend).
Prints one JSON object as the last stdout line.
"""

import os
import sys
import time
from datetime import UTC, datetime
from importlib.metadata import version

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # bench/ for common
sys.path.insert(0, HERE)

import common  # noqa: E402
import redis  # noqa: E402
import tasks  # noqa: E402
from rq import Queue  # noqa: E402

DB = 2
LOG = f"/tmp/bench-rq-{os.getpid()}.log"
BIN = os.path.dirname(sys.executable)
WORKER_CMD = [os.path.join(BIN, "rq"), "worker", "--url", tasks.REDIS_URL, "--path", HERE,
              "--with-scheduler", "default"]
SCHEDULER_CMD = [os.path.join(BIN, "rqscheduler"), "--url", tasks.REDIS_URL, "--path", HERE,
                 "--interval", "1"]
# Two worker processes in each row (BENCHMARKS.md, "Rules"). default: RQ's Worker, which
# forks a work horse per job; tuned: SimpleWorker, which runs jobs in the worker process
# itself ("Worker classes", https://python-rq.org/docs/workers/#worker-arguments and
# https://python-rq.org/docs/workers/#performance-notes: forking per job is the cost the
# docs name; SimpleWorker avoids it).
VARIANTS = {"default": WORKER_CMD,
            "tuned": WORKER_CMD[:2] + ["--worker-class", "rq.worker.SimpleWorker"]
            + WORKER_CMD[2:]}
CONFIG = {
    "default": "2 x rq worker --with-scheduler (Worker: a forked work horse per job), "
               "Redis db 2",
    "tuned": "2 x rq worker --with-scheduler --worker-class rq.worker.SimpleWorker (no "
             "fork per job), Redis db 2",
}
HISTORY = ("Redis only: job hashes and results expire (result_ttl 500 s by default); "
           "RQ has no database backend. A job whose worker dies goes to the "
           "StartedJobRegistry and is cleaned up as failed, not redelivered")


def versions():
    """Versions of the packages this adapter exercises."""
    return {name: version(name) for name in ("rq", "rq-scheduler", "redis")}


def connection():
    """redis-py client on our db index."""
    return redis.Redis.from_url(tasks.REDIS_URL)


def alive(procs):
    """True while every proc runs; raises once one has exited (so waits fail fast)."""
    for proc in procs:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[1]} exited with {proc.returncode}; see {LOG}")
    return True


def start_workers(variant="default"):
    """Start two worker processes; return (procs, epoch seconds when spawned)."""
    started = time.time()
    procs = [common.spawn(VARIANTS[variant], cwd=HERE, log_path=LOG) for _ in range(2)]
    return procs, started


def wait_workers_ready(procs, timeout_s=60):
    """Block until both workers log that they listen; raise on timeout or exit."""
    def ready():
        alive(procs)
        with open(LOG, errors="replace") as fh:
            return fh.read().count("Listening on") >= 2
    if not common.wait_until(ready, timeout_s, 0.1):
        raise RuntimeError(f"workers not ready after {timeout_s} s; see {LOG}")


def base_details(n=None, variant="default"):
    """Details every workload reports."""
    return {
        "worker_cmd": " ".join(VARIANTS[variant]) + "  (x2)", "versions": versions(),
        "n": n, "hardware": common.hardware(), "log": LOG,
        **common.row_facts(variant, CONFIG[variant], False, HISTORY),
    }


def enqueue_bulk(q, n, chunk=1000):
    """Enqueue n no-ops through Queue.enqueue_many (one pipeline per chunk)."""
    for start in range(0, n, chunk):
        size = min(chunk, n - start)
        q.enqueue_many([Queue.prepare_data(tasks.noop) for _ in range(size)])


def w1(args):
    """Ingest: N single q.enqueue calls, then N through q.enqueue_many."""
    n = common.default_n(args)
    common.redis_flushdb(DB)
    q = Queue("default", connection=connection())
    t0 = time.perf_counter()
    for _ in range(n):
        q.enqueue(tasks.noop)
    single = n / (time.perf_counter() - t0)
    common.redis_flushdb(DB)
    t0 = time.perf_counter()
    enqueue_bulk(q, n)
    bulk = n / (time.perf_counter() - t0)
    common.redis_flushdb(DB)
    details = base_details(n, args.variant)
    details.update(single_jobs_per_s=round(single, 1), bulk_jobs_per_s=round(bulk, 1),
                   bulk_api="Queue.enqueue_many(Queue.prepare_data(...)), 1000 per call")
    return {"workload": "W1", "figure": round(max(single, bulk), 1), "unit": "jobs/s",
            "details": details}


def w2(args):
    """Drain: N queued no-ops, 2 workers, until all are in the FinishedJobRegistry."""
    n = common.default_n(args)
    common.redis_flushdb(DB)
    conn = connection()
    q = Queue("default", connection=conn)
    enqueue_bulk(q, n)
    procs, t0 = start_workers(args.variant)
    finished = q.finished_job_registry
    done = common.wait_until(lambda: alive(procs) and finished.count >= n, 15 * 60, 0.05)
    t1 = time.time()
    details = base_details(n, args.variant)
    details.update(seconds=round(t1 - t0, 3), finished=finished.count,
                   failed=q.failed_job_registry.count,
                   completion="FinishedJobRegistry count == N (RQ saves the result before "
                              "moving the job there)",
                   history_store="Redis (job hashes + results, default result_ttl 500 s); "
                                 "RQ has no database backend")
    for proc in procs:
        common.stop(proc)
    if not done:
        return {"workload": "W2", "figure": None, "failed":
                f"{details['finished']}/{n} finished after {t1 - t0:.0f} s",
                "details": details}
    return {"workload": "W2", "figure": round(n / (t1 - t0), 1), "unit": "jobs/s",
            "details": details}


def w3(args):
    """Latency: rate jobs/s for duration s via enqueue_at(now + 2 s); lag = start - ETA."""
    duration = common.default_duration(args)
    total = int(args.rate * duration)
    common.redis_flushdb(DB)
    conn = connection()
    q = Queue("default", connection=conn)
    procs, _ = start_workers(args.variant)
    wait_workers_ready(procs)
    t_start = time.time()
    for i in range(total):
        delay = t_start + i / args.rate - time.time()
        if delay > 0:
            time.sleep(delay)
        scheduled = time.time() + 2.0
        q.enqueue_at(datetime.fromtimestamp(scheduled, UTC), tasks.mark, scheduled)
    common.wait_until(lambda: alive(procs) and conn.llen(tasks.STARTS_KEY) >= total, 120, 0.2)
    lags = []
    for raw in conn.lrange(tasks.STARTS_KEY, 0, -1):
        scheduled, started = map(float, raw.split())
        lags.append((started - scheduled) * 1000.0)
    for proc in procs:
        common.stop(proc)
    details = base_details(total, args.variant)
    p99 = common.percentile(lags, 99)
    details.update(
        rate=args.rate, duration_s=duration, count=len(lags), missing=total - len(lags),
        p50_ms=common.percentile(lags, 50), p99_ms=p99, max_ms=max(lags) if lags else None,
        api="Queue.enqueue_at (RQ's built-in scheduler in the worker, `--with-scheduler`, "
            "polls every 1 s)")
    return {"workload": "W3", "figure": round(p99, 1) if p99 is not None else None,
            "unit": "ms", "details": details}


def w4(args):
    """Top of the minute: N rq-scheduler cron jobs '* * * * *' due at the same boundary."""
    from rq_scheduler import Scheduler

    n = common.default_n(args)
    common.redis_flushdb(DB)
    conn = connection()
    scheduler = Scheduler(queue_name="default", connection=conn)
    key = scheduler.scheduled_jobs_key
    # Registration fixes each job's first run to the next boundary, so it must not cross
    # one: start it early enough in a minute (it runs at about a thousand per second).
    if time.time() % 60 > (45 if n <= 2000 else 5):
        common.log("rq W4: waiting for the next minute to register")
        time.sleep(60 - time.time() % 60 + 0.5)
    t_reg = time.perf_counter()
    for _ in range(n):
        scheduler.cron("* * * * *", func=tasks.mark_cron, queue_name="default")
    reg_s = time.perf_counter() - t_reg
    boundary = float(conn.zrange(key, 0, 0, withscores=True)[0][1])
    if conn.zcount(key, boundary, boundary) != n:
        raise RuntimeError("registration crossed a minute boundary")
    if boundary - time.time() < 5:
        raise RuntimeError("registration ended too close to the boundary")
    procs, _ = start_workers(args.variant)
    procs.append(common.spawn(SCHEDULER_CMD, cwd=HERE, log_path=LOG))
    wait_workers_ready(procs[:2])
    queued_at = None
    deadline = boundary + 300
    while time.time() < deadline:
        alive(procs)
        now = time.time()
        if queued_at is None and now >= boundary and conn.zcount(key, "-inf", boundary) == 0:
            queued_at = now
        if conn.llen(tasks.STARTS_KEY) >= n:
            break
        time.sleep(0.05)
    starts = [float(x) for x in conn.lrange(tasks.STARTS_KEY, 0, n - 1)]
    for proc in procs:
        common.stop(proc)
    details = base_details(n, args.variant)
    details.update(
        boundary=boundary, registration_s=round(reg_s, 2), started=len(starts),
        queued_s=round(queued_at - boundary, 3) if queued_at else None,
        started_s=round(max(starts) - boundary, 3) if starts else None,
        first_started_s=round(min(starts) - boundary, 3) if starts else None,
        scheduler_cmd=" ".join(SCHEDULER_CMD),
        note="rq-scheduler (default poll interval 60 s; we pass --interval 1). queued_s is "
             "when no job is left with its score at the boundary (polled every 50 ms). "
             "RQ 3 also ships `rq cron` (not used: the benchmark names rq-scheduler)")
    if len(starts) < n:
        return {"workload": "W4", "figure": None, "failed":
                f"{len(starts)}/{n} started within 5 minutes", "details": details}
    return {"workload": "W4", "figure": details["started_s"], "unit": "s", "details": details}


def w5(args):
    """Cron tick cost: not measured for peers."""
    return {"workload": "W5", "unsupported": "measured for ours only (contract)"}


def w6(args):
    """Redis bytes per pending job, 50,000 pending, no workers running."""
    n = args.n or 50000
    common.redis_flushdb(DB)
    time.sleep(0.5)
    q = Queue("default", connection=connection())
    before = common.redis_used_memory()
    enqueue_bulk(q, n)
    after = common.redis_used_memory()
    queued = q.count
    key_bytes = common.redis_db_bytes(DB)
    common.redis_flushdb(DB)
    details = base_details(n, args.variant)
    details.update(used_memory_before=before, used_memory_after=after, queued=queued,
                   key_bytes_per_run=round(key_bytes / n, 1),
                   note="INFO used_memory is server-wide: other dbs' activity adds noise; "
                        "each pending job is a job hash + a queue list entry")
    return {"workload": "W6", "figure": round((after - before) / n, 1), "unit": "bytes/run",
            "details": details}


WORKLOADS = {"W1": w1, "W2": w2, "W3": w3, "W4": w4, "W5": w5, "W6": w6}


def main():
    """Run one workload of the contract and print its JSON line."""
    common.run_adapter("RQ bench adapter", WORKLOADS)


if __name__ == "__main__":
    main()
