"""Dramatiq adapter for bench/run.py (the adapter contract is in bench/run.py's docstring).

Run with the dramatiq venv:
    bench/.venvs/dramatiq/bin/python bench/peers/dramatiq/bench.py W2 [--variant default|tuned]
Redis db 3 only (the broker). Prints one JSON object as the last stdout line.
"""

import os
import sys
import time
from importlib.metadata import version

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # bench/ for common
sys.path.insert(0, HERE)

import common  # noqa: E402
import tasks  # noqa: E402

DB = 3
LOG = f"/tmp/bench-dramatiq-{os.getpid()}.log"
WORKER_CMD = [
    os.path.join(os.path.dirname(sys.executable), "dramatiq"), "tasks",
    "--processes", "2", "--path", HERE,
]
# Two worker processes in each row (BENCHMARKS.md, "Rules"). default: Dramatiq's defaults,
# 8 threads per process and a read-ahead of 2 x threads messages per process
# (https://dramatiq.io/reference.html#environment-variables, dramatiq_queue_prefetch;
# https://dramatiq.io/guide.html#workers). tuned: the same threads, a read-ahead of 256
# messages per process through dramatiq_queue_prefetch (the command line has no flag for
# it): for short messages the Redis consumer otherwise sleeps whenever its window is full.
VARIANTS = {"default": ({}, []),
            "tuned": ({"dramatiq_queue_prefetch": "256"}, [])}
CONFIG = {
    "default": "dramatiq --processes 2 (8 threads each, read-ahead 16), RedisBroker, "
               "default middleware (no Results)",
    "tuned": "dramatiq --processes 2 (8 threads each) with dramatiq_queue_prefetch=256, "
             "RedisBroker, default middleware (no Results)",
}
HISTORY = ("none: an acked message is deleted from Redis (dead letters are kept 7 days); "
           "Dramatiq stores results only with its Results middleware")


def versions():
    """Versions of the packages this adapter exercises."""
    return {name: version(name) for name in ("dramatiq", "redis")}


def redis_client():
    """redis-py client on our db index."""
    import redis

    return redis.Redis.from_url(tasks.REDIS_URL)


def start_workers(variant="default"):
    """Start the 2-process worker and return (Popen, epoch seconds when spawned)."""
    env, extra = VARIANTS[variant]
    started = time.time()
    proc = common.spawn(WORKER_CMD + extra, cwd=HERE, log_path=LOG,
                        env=dict(os.environ, **env))
    return proc, started


def wait_workers_ready(proc, timeout_s=60):
    """Block until both worker processes logged readiness; raise on timeout or exit."""
    def ready():
        if proc.poll() is not None:
            raise RuntimeError(f"dramatiq exited with {proc.returncode}; see {LOG}")
        with open(LOG, errors="replace") as fh:
            return fh.read().count("is ready for action") >= 2
    if not common.wait_until(ready, timeout_s, 0.1):
        raise RuntimeError(f"workers not ready after {timeout_s} s; see {LOG}")


def alive(proc):
    """True while proc runs; raises once it has exited (so waits fail fast)."""
    if proc.poll() is not None:
        raise RuntimeError(f"worker exited with {proc.returncode}; see {LOG}")
    return True


def pending(r):
    """Messages not yet acked in the default queue and its delay queue."""
    return r.hlen(f"dramatiq:{tasks.QUEUE}.msgs") + r.hlen(f"dramatiq:{tasks.QUEUE}.DQ.msgs")


def base_details(n=None, variant="default"):
    """Details every workload reports."""
    env, extra = VARIANTS[variant]
    return {
        "worker_cmd": " ".join([*(f"{k}={v}" for k, v in env.items()), *WORKER_CMD, *extra]),
        "versions": versions(), "n": n, "hardware": common.hardware(), "log": LOG,
        **common.row_facts(variant, CONFIG[variant], False, HISTORY),
    }


def w1(args):
    """Ingest: N sends through actor.send (Dramatiq has no batch enqueue)."""
    n = common.default_n(args)
    common.redis_flushdb(DB)
    t0 = time.perf_counter()
    for _ in range(n):
        tasks.noop.send()
    single = n / (time.perf_counter() - t0)
    details = base_details(n, args.variant)
    details.update(single_jobs_per_s=round(single, 1), bulk_jobs_per_s=None,
                   bulk_note="no batch API: group().run() sends one message at a time")
    common.redis_flushdb(DB)
    return {"workload": "W1", "figure": round(single, 1), "unit": "jobs/s", "details": details}


def w2(args):
    """Drain: N queued no-ops, 2 processes, until all acked with results stored."""
    n = common.default_n(args)
    common.redis_flushdb(DB)
    r = redis_client()
    for _ in range(n):
        tasks.noop.send()
    proc, t0 = start_workers(args.variant)
    done = common.wait_until(lambda: alive(proc) and pending(r) == 0, 15 * 60, 0.05)
    t1 = time.time()
    details = base_details(n, args.variant)
    failed = r.hlen(f"dramatiq:{tasks.QUEUE}.XQ.msgs")
    details.update(seconds=round(t1 - t0, 3), dead_lettered=failed,
                   completion="all messages acked (default.msgs empty: a message leaves "
                              "it when its actor has returned)")
    common.stop(proc)
    if not done or failed:
        return {"workload": "W2", "figure": None, "failed":
                f"not drained after {t1 - t0:.0f} s ({failed} dead-lettered)",
                "details": details}
    return {"workload": "W2", "figure": round(n / (t1 - t0), 1), "unit": "jobs/s",
            "details": details}


def w3(args):
    """Latency: rate jobs/s for duration s, each delayed 2 s; lag = start - scheduled."""
    duration = common.default_duration(args)
    total = int(args.rate * duration)
    common.redis_flushdb(DB)
    r = redis_client()
    proc, _ = start_workers(args.variant)
    wait_workers_ready(proc)
    t_start = time.time()
    for i in range(total):
        delay = t_start + i / args.rate - time.time()
        if delay > 0:
            time.sleep(delay)
        scheduled = time.time() + 2.0
        tasks.mark.send_with_options(args=(scheduled,), delay=2000)
    common.wait_until(lambda: alive(proc) and r.llen(tasks.STARTS_KEY) >= total, 120, 0.2)
    lags = []
    for raw in r.lrange(tasks.STARTS_KEY, 0, -1):
        scheduled, started = map(float, raw.split())
        lags.append((started - scheduled) * 1000.0)
    common.stop(proc)
    details = base_details(total, args.variant)
    p99 = common.percentile(lags, 99)
    details.update(
        rate=args.rate, duration_s=duration, count=len(lags), missing=total - len(lags),
        p50_ms=common.percentile(lags, 50), p99_ms=p99, max_ms=max(lags) if lags else None,
        api="actor.send_with_options(delay=2000 ms): the delay queue, moved to the work "
            "queue by the worker's consumer when due",
        note="an idle Redis consumer polls with exponential backoff up to the worker timeout "
             "(dramatiq_worker_timeout, default 1000 ms), which bounds the lag's tail")
    return {"workload": "W3", "figure": round(p99, 1) if p99 is not None else None,
            "unit": "ms", "details": details}


def w4(args):
    """Top of the minute: Dramatiq has no periodic scheduler."""
    return {"workload": "W4", "unsupported":
            "Dramatiq has no built-in periodic/cron scheduler (its docs point to APScheduler "
            "or periodiq, third-party)"}


def w5(args):
    """Cron tick cost: no scheduler to measure."""
    return {"workload": "W5", "unsupported": "Dramatiq has no periodic scheduler"}


def w6(args):
    """Redis bytes per pending message, 50,000 pending, no workers running."""
    n = args.n or 50000
    common.redis_flushdb(DB)
    time.sleep(0.5)
    before = common.redis_used_memory()
    for _ in range(n):
        tasks.noop.send()
    after = common.redis_used_memory()
    r = redis_client()
    queued = r.llen(f"dramatiq:{tasks.QUEUE}")
    key_bytes = common.redis_db_bytes(DB)
    common.redis_flushdb(DB)
    per = (after - before) / n
    details = base_details(n, args.variant)
    details.update(used_memory_before=before, used_memory_after=after, queued=queued,
                   key_bytes_per_run=round(key_bytes / n, 1),
                   note="INFO used_memory is server-wide: other dbs' activity adds noise; "
                        "each pending message is a list entry + a .msgs hash field")
    return {"workload": "W6", "figure": round(per, 1), "unit": "bytes/run", "details": details}


WORKLOADS = {"W1": w1, "W2": w2, "W3": w3, "W4": w4, "W5": w5, "W6": w6}


def main():
    """Run one workload of the contract and print its JSON line."""
    common.run_adapter("Dramatiq bench adapter", WORKLOADS)


if __name__ == "__main__":
    main()
