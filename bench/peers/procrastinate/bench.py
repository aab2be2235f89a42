"""procrastinate adapter of the benchmark (the adapter contract is in bench/run.py's docstring).

Run with the peer's own virtualenv:
    bench/.venvs/procrastinate/bin/python bench/peers/procrastinate/bench.py W2 [--quick]

Setup per procrastinate's docs: PostgreSQL only (database bench_procrastinate, dropped and
created per run, schema applied with ``procrastinate schema --apply``), two
``procrastinate worker`` processes at the row's options (VARIANTS below; ``--variant``).
History is its own procrastinate_jobs table (status 'succeeded'). Prints one JSON line last.
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

DBNAME = "bench_procrastinate"
DSN = common.pg_url(DBNAME)
os.environ["BENCH_PG_DSN"] = DSN
os.environ.setdefault("BENCH_STARTS_FILE", os.devnull)

import psycopg  # noqa: E402
import tasks  # noqa: E402

WORKER_CMD = [sys.executable, "-m", "procrastinate", "--app=tasks.app", "worker"]
# Two worker processes in each row (BENCHMARKS.md, "Rules"). default: procrastinate's
# defaults (concurrency 1: one job at a time per worker, LISTEN/NOTIFY, polling every 5 s,
# jobs kept; https://procrastinate.readthedocs.io/en/stable/reference.html#worker).
# tuned: --concurrency 16, the documented way to run several jobs at once in one worker
# ("Launch a worker" / "concurrency", https://procrastinate.readthedocs.io/en/stable/howto/
# basics/worker.html): the worker fetches the next job while others run.
VARIANTS = {"default": [], "tuned": ["--concurrency", "16"]}
CONFIG = {
    "default": "2 x procrastinate worker (concurrency 1), PsycopgConnector",
    "tuned": "2 x procrastinate worker --concurrency 16, PsycopgConnector",
}
HISTORY = ("durable: procrastinate_jobs rows stay with status 'succeeded' "
           "(delete_jobs=never, the default), in PostgreSQL")
BATCH = 1000


class Workers:
    """The worker processes started by this adapter (each in its own process group)."""

    def __init__(self):
        self.procs = []

    def start(self, cmd, **kwargs):
        """common.spawn(cmd) and remember it."""
        self.procs.append(common.spawn(cmd, **kwargs))

    def stop(self):
        """Stop every process group started here (SIGTERM, then SIGKILL)."""
        while self.procs:
            common.stop(self.procs.pop(), grace_s=10.0)


procs = Workers()


def worker_env(**extra):
    """Environment of the worker processes: the app module importable, settings by env."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(HERE) + os.pathsep + env.get("PYTHONPATH", "")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def reset_database():
    """Drop and create bench_procrastinate, then apply procrastinate's schema (its CLI)."""
    common.pg_recreate_database(DBNAME)
    subprocess.run([sys.executable, "-m", "procrastinate", "--app=tasks.app", "schema",
                    "--apply"], cwd=HERE, env=worker_env(), check=True,
                   capture_output=True, timeout=120)


VARIANT = "default"  # main() sets it from --variant


def start_workers(logdir, **env):
    """Start the two worker processes; returns the command line used (a string)."""
    extra = VARIANTS[VARIANT]
    for i in range(2):
        procs.start(WORKER_CMD + extra + ["--name", f"bench{i}"], cwd=HERE,
                    env=worker_env(**env), log_path=Path(logdir) / f"worker{i}.log")
    return " ".join(["procrastinate"] + WORKER_CMD[3:] + extra) + " (x2 processes)"


def query(sql, params=None):
    """One value from bench_procrastinate (None for a statement without rows)."""
    with psycopg.connect(DSN, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchone()[0] if cur.description else None


def versions():
    """Versions of procrastinate, psycopg and the PostgreSQL server."""
    return {"procrastinate": version("procrastinate"), "psycopg": version("psycopg"),
            "python": sys.version.split()[0],
            "postgresql": query("SHOW server_version")}


def defer_bulk(n):
    """Defer n no-op jobs with batch_defer, BATCH at a time (the async no-op when
    BENCH_ASYNC is set: bench/async_pairs.py)."""
    done = 0
    task = tasks.anoop if os.environ.get("BENCH_ASYNC") else tasks.noop
    while done < n:
        k = min(BATCH, n - done)
        task.batch_defer(*({} for _ in range(k)))
        done += k


def w1(n):
    """Ingest: n single defers, then n through batch_defer (fresh tables each)."""
    reset_database()
    with tasks.app.open():
        t0 = time.perf_counter()
        for _ in range(n):
            tasks.noop.defer()
        single = n / (time.perf_counter() - t0)
        query("TRUNCATE procrastinate_jobs CASCADE")
        t0 = time.perf_counter()
        defer_bulk(n)
        bulk = n / (time.perf_counter() - t0)
    stored = query("SELECT count(*) FROM procrastinate_jobs")
    return max(single, bulk), "jobs/s", {
        "n": n, "single_jobs_per_s": round(single, 1), "bulk_jobs_per_s": round(bulk, 1),
        "bulk_api": f"Task.batch_defer, {BATCH} jobs per call", "stored_after_bulk": stored,
    }


def w2(n, logdir, timeout=900):
    """Drain: n jobs deferred (untimed), then two workers until all n have succeeded."""
    reset_database()
    with tasks.app.open():
        defer_bulk(n)
    query("ANALYZE")
    t0 = time.monotonic()
    cmd = start_workers(logdir)
    count_sql = "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
    ok = common.wait_until(lambda: query(count_sql) >= n, timeout, 0.1)
    elapsed = time.monotonic() - t0
    procs.stop()
    done = query(count_sql)
    details = {"n": n, "seconds": round(elapsed, 3), "succeeded": done, "worker_cmd": cmd,
               "history": "procrastinate_jobs rows with status 'succeeded' (kept: "
                          "delete_jobs=never, the default)"}
    if not ok:
        details["failed"] = f"only {done} of {n} succeeded within {timeout} s"
        return None, "jobs/s", details
    return n / elapsed, "jobs/s", details


def wait_workers_ready(timeout=60):
    """Until both workers have registered themselves in procrastinate_workers."""
    return common.wait_until(
        lambda: query("SELECT count(*) FROM procrastinate_workers") >= 2, timeout, 0.2)


def w3(duration, logdir, rate=116.0, delay=2.0):
    """Latency: rate jobs/s for duration s, each with schedule_at 2 s after submission."""
    reset_database()
    starts = Path(logdir) / "starts.txt"
    os.environ["BENCH_STARTS_FILE"] = str(starts)
    cmd = start_workers(logdir)
    if not wait_workers_ready():
        raise RuntimeError("procrastinate workers did not register within 60 s")
    total = int(duration * rate)
    scheduled = {}
    with tasks.app.open():
        t0 = time.time()
        for i in range(total):
            pause = t0 + i / rate - time.time()
            if pause > 0:
                time.sleep(pause)
            at = time.time() + delay
            stamp = tasks.astamp if os.environ.get("BENCH_ASYNC") else tasks.stamp
            stamp.configure(schedule_at=datetime.fromtimestamp(at, UTC)).defer(key=i)
            scheduled[str(i)] = at
        submit_s = time.time() - t0
    common.wait_until(lambda: len(common.read_starts(starts)) >= total, delay + 60, 0.25)
    procs.stop()
    seen = common.read_starts(starts)
    lags = [(seen[k] - at) * 1000 for k, at in scheduled.items() if k in seen]
    details = {
        "rate_per_s": rate, "duration_s": duration, "count": len(lags),
        "missing": total - len(lags), "submit_seconds": round(submit_s, 2),
        "p50_ms": _r(common.percentile(lags, 50)), "p99_ms": _r(common.percentile(lags, 99)),
        "max_ms": _r(max(lags) if lags else None), "worker_cmd": cmd,
        "api": "task.configure(schedule_at=...).defer(); workers poll for scheduled jobs "
               "every fetch_job_polling_interval (default 5 s)",
    }
    return _r(common.percentile(lags, 99)), "ms", details


def _r(x, nd=1):
    return None if x is None else round(x, nd)


def w4(n, logdir, limit=300):
    """Top of the minute: n periodic registrations (one task, n periodic_ids), every-minute
    cron; seconds from the boundary T until all n were deferred and until all had started."""
    reset_database()
    starts = Path(logdir) / "starts.txt"
    # With max_delay 30 s a worker started more than 30 s after a boundary does not catch
    # up that boundary's n jobs at startup (procrastinate's documented periodic_defaults).
    max_delay = 30
    second = time.time() % 60
    if second < 32:
        time.sleep(32 - second)
    elif second > 45:
        time.sleep(60 - second + 32)
    boundary = int(time.time() // 60 * 60 + 60)
    t_start = time.time()
    cmd = start_workers(logdir, BENCH_STARTS_FILE=starts, BENCH_PERIODIC_N=n,
                        BENCH_PERIODIC_MAX_DELAY=max_delay)
    prefix = f"{boundary}:"

    def started():
        return sum(1 for k in common.read_starts(starts) if k.startswith(prefix))

    done = common.wait_until(lambda: started() >= n, boundary + limit - time.time(), 0.5)
    procs.stop()
    seen = [t for k, t in common.read_starts(starts).items() if k.startswith(prefix)]
    deferred, last_deferred = (
        psycopg.connect(DSN, autocommit=True).execute(
            "SELECT count(*), extract(epoch FROM max(e.at)) FROM procrastinate_events e "
            "JOIN procrastinate_jobs j ON j.id = e.job_id WHERE e.type = 'deferred' "
            "AND j.task_name = 'tick' AND (j.args->>'timestamp')::bigint = %s",
            (boundary,)).fetchone())
    details = {
        "n": n, "boundary_epoch": boundary, "started_before_boundary_s": round(
            boundary - t_start, 1),
        "registered": f"one task with {n} periodic_ids (app.periodic(cron='* * * * *', "
                      f"periodic_id=...)), periodic_defaults max_delay={max_delay} s",
        "deferred": deferred, "started": len(seen),
        "queued_s": _r(float(last_deferred) - boundary, 3) if last_deferred else None,
        "started_s": _r(max(seen) - boundary, 3) if seen else None,
        "worker_cmd": cmd,
        "note": "each of the 2 workers runs the periodic deferrer; the database's unique "
                "(task, periodic_id, timestamp) keeps one job per registration",
    }
    if not done:
        details["failed"] = f"{len(seen)} of {n} started within {limit} s of the boundary"
        return None, "s", details
    return details["started_s"], "s", details


def w6(n):
    """PG-only: bytes per pending job in procrastinate's tables (information only)."""
    reset_database()
    with tasks.app.open():
        defer_bulk(n)
    query("VACUUM ANALYZE")
    jobs = query("SELECT pg_total_relation_size('procrastinate_jobs')")
    events = query("SELECT pg_total_relation_size('procrastinate_events')")
    return {"n_pending": n, "jobs_table_bytes_per_row": round(jobs / n, 1),
            "events_table_bytes_per_job": round(events / n, 1),
            "note": "pg_total_relation_size (heap + indexes) / pending jobs"}


def main():
    common.install_signal_handlers()
    parser = common.base_parser(__doc__.split("\n")[0])
    args = parser.parse_args()
    global VARIANT
    VARIANT = args.variant
    wl = args.workload
    size = common.default_n(args)
    common.log(f"procrastinate {wl} quick={args.quick}")
    try:
        with tempfile.TemporaryDirectory(prefix="bench-procrastinate-") as logdir:
            if wl == "W1":
                figure, unit, details = w1(size)
            elif wl == "W2":
                figure, unit, details = w2(size, logdir)
            elif wl == "W3":
                figure, unit, details = w3(common.default_duration(args), logdir, rate=args.rate)
            elif wl == "W4":
                figure, unit, details = w4(size, logdir)
            elif wl == "W5":
                common.emit_json({"workload": wl, "unsupported": (
                    "procrastinate has no scheduler tick to measure: each worker's periodic "
                    "deferrer walks its in-process registry")})
                return
            elif wl == "W6":
                common.emit_json({"workload": wl, "unsupported": (
                    "procrastinate keeps pending jobs in PostgreSQL only (no Redis)"),
                    "details": w6(size)})
                return
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
        procs.stop()
        common.emit_json({"workload": wl, "figure": None, "failed": repr(exc)})
        raise
    finally:
        procs.stop()


if __name__ == "__main__":
    main()
