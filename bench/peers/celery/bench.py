"""Celery adapter for bench/run.py (the adapter contract is in bench/run.py's docstring).

Run with the celery venv:
    bench/.venvs/celery/bin/python bench/peers/celery/bench.py W2 [--variant default|tuned]
Redis db 1 (broker), PostgreSQL bench_celery (django-celery-beat's tables, W4). The two
rows (VARIANTS below) and the doc pages behind them: bench/peers/README.md. Prints one
JSON object as the last stdout line.
"""

import os
import sys
import time
from datetime import UTC, datetime
from importlib.metadata import version

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # bench/ for common
sys.path.insert(0, HERE)
os.environ["DJANGO_SETTINGS_MODULE"] = "benchproj.settings"

import common  # noqa: E402

DB = 1
PG_DB = "bench_celery"
LOG = f"/tmp/bench-celery-{os.getpid()}.log"
CELERY = os.path.join(os.path.dirname(sys.executable), "celery")
# W3 and W4 add "-l info" to see the workers' "ready." line; W2 runs at Celery's default
# log level (WARNING), as logging two lines per task at INFO costs a no-op task dearly.
WORKER = [CELERY, "-A", "benchproj", "worker"]
BEAT_CMD = [CELERY, "-A", "benchproj", "beat", "-S", "django", "-l", "info",
            f"--pidfile=/tmp/bench-celery-beat-{os.getpid()}.pid"]
# Two OS processes that run tasks in each row (BENCHMARKS.md, "Rules").
# default: the prefork pool of 2 children (the parent only dispatches), Celery's
#   defaults: prefetch multiplier 4, early ack, no result backend
#   (https://docs.celeryq.dev/en/stable/userguide/workers.html#concurrency,
#   https://docs.celeryq.dev/en/stable/userguide/configuration.html).
# tuned: "Optimizing" (https://docs.celeryq.dev/en/stable/userguide/optimizing.html,
#   "Prefetch Limits": a high multiplier for many short tasks) with the solo pool, which
#   runs tasks in the worker process itself (no pool IPC per task;
#   https://docs.celeryq.dev/en/stable/internals/reference/celery.concurrency.solo.html),
#   two such workers.
VARIANTS = {
    "default": [WORKER + ["-P", "prefork", "-c", "2", "-n", "bench1@%h"]],
    "tuned": [WORKER + ["-P", "solo", "--prefetch-multiplier", "64", "-n", f"bench{i}@%h"]
              for i in (1, 2)],
}
CONFIG = {
    "default": "celery worker -P prefork -c 2 (prefetch multiplier 4, early ack: at most "
               "once on a worker crash), Redis broker, no result backend",
    "tuned": "2 x celery worker -P solo --prefetch-multiplier 64 (early ack), Redis broker, "
             "no result backend",
}
HISTORY = ("none: no result backend (Celery's default); W2 counts finished tasks by an "
           "INCR in task_postrun")


def versions():
    """Versions of the packages this adapter exercises."""
    names = ("celery", "kombu", "redis", "Django", "django-celery-beat",
             "django-celery-results", "psycopg")
    return {name: version(name) for name in names}


def setup_state():
    """Fresh bench_celery database (migrated) and an empty Redis db 1; returns the app."""
    common.redis_flushdb(DB)
    common.pg_recreate_database(PG_DB)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from benchproj.celery import app

    return app


def alive(procs):
    """True while every proc runs; raises once one has exited (so waits fail fast)."""
    for proc in procs:
        if proc.poll() is not None:
            raise RuntimeError(f"celery exited with {proc.returncode}; see {LOG}")
    return True


def start_workers(variant, env=None, info=True):
    """Start the variant's worker processes (with ``-l info`` when ``info``); return
    (Popens, epoch seconds when spawned)."""
    started = time.time()
    extra = ["-l", "info"] if info else []
    procs = [common.spawn(cmd + extra, cwd=HERE, log_path=LOG, env=env)
             for cmd in VARIANTS[variant]]
    return procs, started


def wait_workers_ready(procs, timeout_s=90):
    """Block until every worker logs 'ready.'; raise on timeout or exit."""
    def ready():
        alive(procs)
        with open(LOG, errors="replace") as fh:
            return fh.read().count(" ready.") >= len(procs)
    if not common.wait_until(ready, timeout_s, 0.1):
        raise RuntimeError(f"worker not ready after {timeout_s} s; see {LOG}")


def succeeded():
    """Tasks the workers counted as finished (BENCH_COUNT_DONE, benchproj/celery.py)."""
    from benchproj.celery import DONE_KEY

    return int(redis_client().get(DONE_KEY) or 0)


def redis_client():
    """redis-py client on db 1."""
    import redis

    return redis.Redis.from_url(common.redis_url(DB))


def base_details(n=None, variant="default"):
    """Details every workload reports."""
    return {
        "worker_cmd": " ; ".join(" ".join(c) for c in VARIANTS[variant]),
        "versions": versions(), "n": n, "hardware": common.hardware(), "log": LOG,
        **common.row_facts(variant, CONFIG[variant], False, HISTORY),
    }


def w1(args):
    """Ingest: N noop.delay() calls (Celery has no batch publish)."""
    n = common.default_n(args)
    setup_state()
    from benchproj.celery import noop

    t0 = time.perf_counter()
    for _ in range(n):
        noop.delay()
    single = n / (time.perf_counter() - t0)
    common.redis_flushdb(DB)
    details = base_details(n, args.variant)
    details.update(single_jobs_per_s=round(single, 1), bulk_jobs_per_s=None,
                   bulk_note="no batch publish API: group() publishes one message per task")
    return {"workload": "W1", "figure": round(single, 1), "unit": "jobs/s", "details": details}


def w2(args):
    """Drain: N queued no-ops, 2 children, until N SUCCESS rows are in TaskResult."""
    n = common.default_n(args)
    setup_state()
    from benchproj.celery import noop

    for _ in range(n):
        noop.delay()
    procs, t0 = start_workers(args.variant, env=dict(os.environ, BENCH_COUNT_DONE="1"),
                              info=False)
    done = common.wait_until(lambda: alive(procs) and succeeded() >= n, 15 * 60, 0.05)
    t1 = time.time()
    details = base_details(n, args.variant)
    details.update(seconds=round(t1 - t0, 3), succeeded_rows=succeeded(),
                   completion="the workers' task_postrun INCR of bench:done reached N "
                              "(polled every 50 ms)")
    for proc in procs:
        common.stop(proc)
    if not done:
        return {"workload": "W2", "figure": None, "failed":
                f"{details['succeeded_rows']}/{n} results after {t1 - t0:.0f} s",
                "details": details}
    return {"workload": "W2", "figure": round(n / (t1 - t0), 1), "unit": "jobs/s",
            "details": details}


def w3(args):
    """Latency: rate jobs/s for duration s with apply_async(eta=now + 2 s)."""
    duration = common.default_duration(args)
    total = int(args.rate * duration)
    setup_state()
    from benchproj.celery import STARTS_KEY, mark

    r = redis_client()
    procs, _ = start_workers(args.variant)
    wait_workers_ready(procs)
    t_start = time.time()
    for i in range(total):
        delay = t_start + i / args.rate - time.time()
        if delay > 0:
            time.sleep(delay)
        scheduled = time.time() + 2.0
        mark.apply_async(args=(scheduled,), eta=datetime.fromtimestamp(scheduled, UTC))
    common.wait_until(lambda: alive(procs) and r.llen(STARTS_KEY) >= total, 120, 0.2)
    lags = []
    for raw in r.lrange(STARTS_KEY, 0, -1):
        scheduled, started = map(float, raw.split())
        lags.append((started - scheduled) * 1000.0)
    for proc in procs:
        common.stop(proc)
    details = base_details(total, args.variant)
    p99 = common.percentile(lags, 99)
    details.update(
        rate=args.rate, duration_s=duration, count=len(lags), missing=total - len(lags),
        p50_ms=common.percentile(lags, 50), p99_ms=p99, max_ms=max(lags) if lags else None,
        api="task.apply_async(eta=...): the worker reserves ETA messages at once and holds "
            "them in memory until due (Redis visibility_timeout 3600 s covers them)")
    return {"workload": "W3", "figure": round(p99, 1) if p99 is not None else None,
            "unit": "ms", "details": details}


def w4(args):
    """Top of the minute: N django-celery-beat PeriodicTask rows on an every-minute crontab."""
    n = common.default_n(args)
    setup_state()
    from benchproj.celery import QUEUED_KEY, STARTS_KEY
    from django_celery_beat.models import CrontabSchedule, PeriodicTask, PeriodicTasks

    r = redis_client()
    # A new row's first run is the boundary after its creation (last_run_at defaults to
    # date_changed), and beat must have loaded every row before that boundary: create
    # them early enough in a minute (beat loads ~1K rows at once, 20K take seconds).
    if time.time() % 60 > (40 if n <= 2000 else 10):
        common.log("celery W4: waiting for the next minute to create the rows")
        time.sleep(60 - time.time() % 60 + 0.5)
    t_reg = time.perf_counter()
    cron = CrontabSchedule.objects.create(minute="*", hour="*", day_of_week="*",
                                          day_of_month="*", month_of_year="*", timezone="UTC")
    for start in range(0, n, 5000):
        PeriodicTask.objects.bulk_create([
            PeriodicTask(name=f"bench-{i}", task="bench.mark_cron", crontab=cron)
            for i in range(start, min(n, start + 5000))
        ])
    PeriodicTasks.update_changed()
    reg_s = time.perf_counter() - t_reg
    boundary = (int(time.time()) // 60 + 1) * 60
    workers, _ = start_workers(args.variant)
    beat_env = dict(os.environ, BENCH_COUNT_PUBLISH=str(n))
    beat = common.spawn(BEAT_CMD, cwd=HERE, log_path=LOG, env=beat_env)
    wait_workers_ready(workers)
    queued_at = None
    first_start = {}  # periodic task name -> its first start (epoch seconds)
    read = 0
    deadline = boundary + 300
    while time.time() < deadline and len(first_start) < n:
        alive(workers + [beat] if beat else workers)
        if queued_at is None:
            raw = r.get(QUEUED_KEY)
            if raw:
                queued_at = float(raw)
                # Every task's first run is published: beat has nothing more to add.
                common.stop(beat)
                beat = None
        for raw in r.lrange(STARTS_KEY, read, -1):
            read += 1
            name, started = raw.decode().split()
            first_start.setdefault(name, float(started))
        time.sleep(0.2)
    starts = list(first_start.values())
    queued_count = int(r.get(QUEUED_KEY + ":count") or 0)
    common.kill_all()
    details = base_details(n, args.variant)
    details.update(
        boundary=boundary, registration_s=round(reg_s, 2), started=len(starts),
        queued_s=round(queued_at - boundary, 3) if queued_at else None,
        queued_count=queued_count,
        started_s=round(max(starts) - boundary, 3) if starts else None,
        first_started_s=round(min(starts) - boundary, 3) if starts else None,
        beat_cmd=" ".join(BEAT_CMD),
        note="N PeriodicTask rows (bulk_create) on one CrontabSchedule '* * * * *'; queued_s "
             "is when beat's after_task_publish signal had seen all N task names; started_s "
             "is the last first-start among the N (a slow beat sends early ones again at "
             "the next minute; those repeats are ignored)")
    if len(starts) < n:
        return {"workload": "W4", "figure": None, "failed":
                f"{len(starts)}/{n} started within 5 minutes (queued: "
                f"{details['queued_s']})", "details": details}
    return {"workload": "W4", "figure": details["started_s"], "unit": "s", "details": details}


def w5(args):
    """Cron tick cost: not measured for peers."""
    return {"workload": "W5", "unsupported": "measured for ours only (contract)"}


def w6(args):
    """Redis bytes per pending message, 50,000 pending, no worker running."""
    n = args.n or 50000
    setup_state()
    from benchproj.celery import noop

    time.sleep(0.5)
    before = common.redis_used_memory()
    for _ in range(n):
        noop.delay()
    after = common.redis_used_memory()
    queued = redis_client().llen("celery")
    key_bytes = common.redis_db_bytes(DB)
    common.redis_flushdb(DB)
    details = base_details(n, args.variant)
    details.update(used_memory_before=before, used_memory_after=after, queued=queued,
                   key_bytes_per_run=round(key_bytes / n, 1),
                   note="INFO used_memory is server-wide: other dbs' activity adds noise; "
                        "each pending task is one JSON message in the 'celery' list")
    return {"workload": "W6", "figure": round((after - before) / n, 1), "unit": "bytes/run",
            "details": details}


WORKLOADS = {"W1": w1, "W2": w2, "W3": w3, "W4": w4, "W5": w5, "W6": w6}


def main():
    """Run one workload of the contract and print its JSON line."""
    common.run_adapter("Celery bench adapter", WORKLOADS)


if __name__ == "__main__":
    main()
