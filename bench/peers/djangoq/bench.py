"""django-q2 adapter of the benchmark (the adapter contract is in bench/run.py's docstring).

Run with the peer's own virtualenv:
    bench/.venvs/djangoq/bin/python bench/peers/djangoq/bench.py W2 [--quick]

Setup per django-q2's docs: a tiny Django project (benchq/settings.py) with the ORM tables
in PostgreSQL database bench_djangoq (dropped, created and migrated per run) and django-q2's
default broker, Redis (db 4, FLUSHDB per run). One ``manage.py qcluster`` with
Q_CLUSTER workers=2: two worker processes each running one task at a time, plus the
cluster's sentinel, pusher, monitor (saves results) and guard (runs the scheduler about
every 30 s). History is its Success/Task table. Prints one JSON line last.
"""

import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))  # bench/ for common
sys.path.insert(0, str(HERE))

import common  # noqa: E402

DBNAME = "bench_djangoq"
REDIS_DB = 4
os.environ["DJANGO_SETTINGS_MODULE"] = "benchq.settings"
os.environ.setdefault("BENCH_STARTS_FILE", os.devnull)

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402
from django_q.brokers import get_broker  # noqa: E402
from django_q.models import Schedule  # noqa: E402
from django_q.tasks import async_task, schedule  # noqa: E402

CLUSTER_CMD = [sys.executable, "manage.py", "qcluster"]
# One qcluster of Q_CLUSTER workers=2 in each row (two worker processes: BENCHMARKS.md,
# "Rules"; its sentinel, pusher, monitor and guard are extra processes that run no task).
# default: django-q2's defaults but save_limit 0 (the default, 250, keeps only the last 250
# successes; W2 counts them all), https://django-q2.readthedocs.io/en/master/configure.html.
# tuned: bulk 50, "the number of messages each cluster tries to get from the broker per
# call" (the same page: "can improve performance").
VARIANTS = {"default": {}, "tuned": {"BENCH_DJQ_BULK": "50"}}
CONFIG = {
    "default": "manage.py qcluster (workers 2, bulk 1, save_limit 0), Redis broker db 4",
    "tuned": "manage.py qcluster (workers 2, bulk 50, save_limit 0), Redis broker db 4",
}
HISTORY = "durable: a django_q_task row per success (save_limit 0), in PostgreSQL"
VARIANT = "default"  # main() sets it from --variant


class Cluster:
    """The qcluster process group started by this adapter."""

    def __init__(self):
        self.procs = []

    def start(self, logdir, **env):
        """Start ``manage.py qcluster``; returns the command line used (a string)."""
        full_env = dict(os.environ, **VARIANTS[VARIANT])
        full_env.update({k: str(v) for k, v in env.items()})
        self.procs.append(common.spawn(CLUSTER_CMD, env=full_env, cwd=HERE,
                                       log_path=Path(logdir) / "qcluster.log"))
        return f"python manage.py qcluster ({CONFIG[VARIANT]})"

    def stop(self):
        """Stop the cluster's process group (SIGTERM, then SIGKILL)."""
        while self.procs:
            common.stop(self.procs.pop(), grace_s=10.0)


cluster = Cluster()


def reset():
    """Drop/create bench_djangoq, migrate django_q's tables, FLUSHDB Redis db 4."""
    connection.close()
    common.pg_recreate_database(DBNAME)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=HERE,
                   check=True, timeout=300)
    common.redis_flushdb(REDIS_DB)


def scalar(sql, params=None):
    """One value from bench_djangoq (None for a statement without rows)."""
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchone()[0] if cur.description else None


def versions():
    """Versions of django-q2, Django, redis-py and the servers."""
    return {"django-q2": version("django-q2"), "django": version("django"),
            "redis-py": version("redis"), "python": sys.version.split()[0],
            "postgresql": scalar("SHOW server_version"),
            "broker": get_broker().info()}


def settings_details():
    """The Q_CLUSTER used, for the details."""
    from django.conf import settings

    return dict(settings.Q_CLUSTER)


def _r(x, nd=1):
    return None if x is None else round(x, nd)


def w1(n):
    """Ingest: n async_task calls (django-q2 has no batch enqueue API)."""
    reset()
    broker = get_broker()
    t0 = time.perf_counter()
    for _ in range(n):
        async_task("benchq.tasks.noop", broker=broker)
    single = n / (time.perf_counter() - t0)
    queued = broker.queue_size()
    return single, "jobs/s", {
        "n": n, "single_jobs_per_s": round(single, 1), "bulk_jobs_per_s": None,
        "bulk_api": "none (async_iter enqueues one task per item through async_task, as one "
                    "result group)", "queued": queued,
    }


def w2(n, logdir, timeout=900):
    """Drain: n tasks enqueued (untimed), then the cluster until n Success rows exist."""
    reset()
    broker = get_broker()
    for _ in range(n):
        async_task("benchq.tasks.noop", broker=broker)
    t0 = time.monotonic()
    cmd = cluster.start(logdir)
    count = "SELECT count(*) FROM django_q_task WHERE success"
    ok = common.wait_until(lambda: scalar(count) >= n, timeout, 0.1)
    elapsed = time.monotonic() - t0
    cluster.stop()
    done = scalar(count)
    details = {"n": n, "seconds": round(elapsed, 3), "succeeded": done, "worker_cmd": cmd,
               "q_cluster": settings_details(),
               "history": "django_q_task rows with success=true (Success proxy model), "
                          "written one by one by the cluster's monitor process"}
    if not ok:
        details["failed"] = f"only {done} of {n} succeeded within {timeout} s"
        return None, "jobs/s", details
    return n / elapsed, "jobs/s", details


def w3(duration, logdir, rate=116.0, delay=2.0):
    """Latency: rate jobs/s for duration s, each a ONCE Schedule with next_run 2 s after
    submission (django-q2 has no ETA on async_task; a Schedule is its run-at-instant API)."""
    reset()
    starts = Path(logdir) / "starts.txt"
    cmd = cluster.start(logdir, BENCH_STARTS_FILE=starts)
    time.sleep(3)  # the cluster's processes start; the first scheduler pass is ~30 s later
    total = int(duration * rate)
    scheduled = {}
    t0 = time.time()
    for i in range(total):
        pause = t0 + i / rate - time.time()
        if pause > 0:
            time.sleep(pause)
        at = time.time() + delay
        schedule("benchq.tasks.stamp", i, schedule_type=Schedule.ONCE,
                 next_run=datetime.fromtimestamp(at, UTC), repeats=-1)
        scheduled[str(i)] = at
    submit_s = time.time() - t0
    # Two ~30 s scheduler passes after the last submission reach every schedule.
    common.wait_until(lambda: len(common.read_starts(starts)) >= total, delay + 90, 0.25)
    cluster.stop()
    seen = common.read_starts(starts)
    lags = [(seen[k] - at) * 1000 for k, at in scheduled.items() if k in seen]
    details = {
        "rate_per_s": rate, "duration_s": duration, "count": len(lags),
        "missing": total - len(lags), "submit_seconds": round(submit_s, 2),
        "p50_ms": _r(common.percentile(lags, 50)), "p99_ms": _r(common.percentile(lags, 99)),
        "max_ms": _r(max(lags) if lags else None), "worker_cmd": cmd,
        "api": "django_q.tasks.schedule(func, key, schedule_type=ONCE, next_run=instant); "
               "the cluster's guard runs the scheduler about every 30 s",
    }
    return _r(common.percentile(lags, 99)), "ms", details


def w4(n, logdir, limit=300, lead=15.0):
    """Top of the minute: n CRON '* * * * *' Schedule rows all with next_run = boundary T;
    seconds from T until all n were pushed to the broker and until all had started."""
    reset()
    starts = Path(logdir) / "starts.txt"
    boundary = common.next_minute_boundary(min_lead_s=lead + 10)
    when = datetime.fromtimestamp(boundary, UTC)
    Schedule.objects.bulk_create(
        [Schedule(name=f"s{i}", func="benchq.tasks.tick", args=repr(i),
                  schedule_type=Schedule.CRON, cron="* * * * *", repeats=-1,
                  next_run=when, intended_date_kwarg="intended") for i in range(n)],
        batch_size=1000)
    scalar("ANALYZE")
    # The guard's first scheduler pass comes ~30 s after the cluster starts: starting it
    # `lead` s before T puts that pass ~(30 - lead) s after T, the mean phase of its cycle.
    time.sleep(max(0.0, boundary - lead - time.time()))
    t_start = time.time()
    cmd = cluster.start(logdir, BENCH_STARTS_FILE=starts)
    prefix = when.isoformat() + "|"
    queued_at = None

    def progress():
        nonlocal queued_at
        if queued_at is None and scalar(
                "SELECT count(*) FROM django_q_schedule WHERE next_run > %s", [when]) >= n:
            queued_at = time.time()
        return sum(1 for k in common.read_starts(starts) if k.startswith(prefix)) >= n

    done = common.wait_until(progress, boundary + limit - time.time(), 0.2)
    cluster.stop()
    seen = [t for k, t in common.read_starts(starts).items() if k.startswith(prefix)]
    details = {
        "n": n, "boundary_epoch": boundary,
        "cluster_started_before_boundary_s": round(boundary - t_start, 1),
        "registered": f"{n} Schedule rows (schedule_type CRON '* * * * *', next_run = T) "
                      "by bulk_create",
        "started": len(seen),
        "queued_s": _r(queued_at - boundary, 3) if queued_at else None,
        "queued_note": "when the scheduler's transaction had advanced all n schedules "
                       "(each task is pushed to Redis just before its schedule is saved)",
        "started_s": _r(max(seen) - boundary, 3) if seen else None,
        "worker_cmd": cmd, "q_cluster": settings_details(),
    }
    if not done:
        details["failed"] = f"{len(seen)} of {n} started within {limit} s of the boundary"
        return None, "s", details
    return details["started_s"], "s", details


def w6(n):
    """Redis bytes per pending task: INFO used_memory delta over n enqueued tasks."""
    reset()
    broker = get_broker()
    before = common.redis_used_memory(REDIS_DB)
    for _ in range(n):
        async_task("benchq.tasks.noop", broker=broker)
    after = common.redis_used_memory(REDIS_DB)
    queued = broker.queue_size()
    common.redis_flushdb(REDIS_DB)
    return (after - before) / n, "bytes", {
        "n_pending": n, "queued": queued, "used_memory_before": before,
        "used_memory_after": after,
        "note": "one signed pickled task per entry of the list django_q:bench:q; used_memory "
                "is server-wide, other databases' activity adds noise",
    }


def vm_rss_kib():
    """Resident set size of this process in KiB (from /proc/self/status)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


def w5(sizes, due=1000):
    """Scheduler pass time with each size of active CRON schedules of which `due` are due:
    django_q.scheduler.scheduler() called in this process (the function the guard calls)."""
    from django_q.scheduler import scheduler

    rows = {}
    for total in sizes:
        reset()
        now = time.time()
        template = Schedule.objects.create(
            name="template", func="benchq.tasks.noop", schedule_type=Schedule.CRON,
            cron="* * * * *", repeats=-1)
        cols = [f.column for f in Schedule._meta.concrete_fields if f.column not in (
            "id", "name", "next_run")]
        collist = ", ".join(cols)
        # Copies of one row by INSERT ... SELECT: `due` are due now, the rest in a day.
        scalar(f"INSERT INTO django_q_schedule (name, next_run, {collist}) "
               f"SELECT 's' || g, CASE WHEN g <= %s THEN to_timestamp(%s) "
               f"ELSE to_timestamp(%s) END, {collist} FROM django_q_schedule, "
               f"generate_series(1, %s) g WHERE id = %s",
               [due, now - 5, now + 86400, total, template.pk])
        template.delete()
        scalar("VACUUM ANALYZE django_q_schedule")
        connection.close()
        t0 = time.perf_counter()
        scheduler(broker=get_broker())
        elapsed = time.perf_counter() - t0
        queued = get_broker().queue_size()
        rows[str(total)] = {"tick_s": round(elapsed, 3), "queued": queued,
                            "bench_process_rss_kib": vm_rss_kib()}
        common.log(f"W5 {total}: {rows[str(total)]}")
    first, last = rows[str(sizes[0])]["tick_s"], rows[str(sizes[-1])]["tick_s"]
    return last, "s", {
        "sizes": rows, "due": due, "ratio_largest_to_smallest": round(last / first, 2),
        "what": "one call of django_q.scheduler.scheduler() (SELECT ... FOR UPDATE of due "
                "rows; django_q_schedule.next_run has no index), then async_task + save per "
                "due schedule; figure = tick seconds at the largest size",
    }


def main():
    common.install_signal_handlers()
    parser = common.base_parser(__doc__.split("\n")[0])
    args = parser.parse_args()
    global VARIANT
    VARIANT = args.variant
    wl = args.workload
    size = common.default_n(args)
    common.log(f"django-q2 {wl} quick={args.quick}")
    try:
        with tempfile.TemporaryDirectory(prefix="bench-djangoq-") as logdir:
            if wl == "W1":
                figure, unit, details = w1(size)
            elif wl == "W2":
                figure, unit, details = w2(size, logdir)
            elif wl == "W3":
                figure, unit, details = w3(common.default_duration(args), logdir,
                                           rate=args.rate)
            elif wl == "W4":
                figure, unit, details = w4(size, logdir)
            elif wl == "W5":
                sizes = [1000, 100000] if args.quick else [1000, 100000, 1000000]
                figure, unit, details = w5(sizes)
            elif wl == "W6":
                figure, unit, details = w6(size)
            else:
                parser.error(f"unknown workload {wl}")
            details["versions"] = versions()
            details["hardware"] = common.hardware()
            details.update(common.row_facts(VARIANT, CONFIG[VARIANT], True, HISTORY))
            if figure is None:
                common.emit_json({"workload": wl, "figure": None, "unit": unit,
                                  "failed": details.get("failed"), "details": details})
            else:
                common.emit_json({"workload": wl, "figure": round(figure, 3), "unit": unit,
                                  "details": details})
    except Exception as exc:
        cluster.stop()
        common.emit_json({"workload": wl, "figure": None, "failed": repr(exc)})
        raise
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
