"""Our side of the side-by-side benchmarks (bench/run.py calls it; the adapter contract
is in bench/run.py's docstring).

    .venv/bin/python bench/ours.py WORKLOAD [--n N] [--rate R] [--duration S] [--quick]

WORKLOAD is W1 ... W6. Resources: PostgreSQL database ``bench_ours`` (created and migrated
when missing, its job and run tables emptied before each workload), Redis db 6 (FLUSHDB),
key prefix ``bench``. The daemons are the real ones, ``manage.py runscheduler``,
``rundispatcher`` and ``runworker --concurrency 2``, started as subprocesses through this
file (``ours.py --daemon COMMAND ...``) so that they also know the ``bench.stamp`` handler
below; everything else in them is the stock daemon. The last stdout line is the result:
``{"workload", "figure", "unit", "details"}``.

Handlers: ``noop`` (jobs/handlers.py) for W1, W2, W6; ``bench.stamp`` for W3 and W4: it
returns ``{"t": time.time()}`` at the handler's start, stored as the run's result, so the
lag is measured where the handler starts, not where the worker leased the run (a run's
``started_at`` is its lease time, stamped for a whole leased batch at once).
"""

import argparse
import asyncio
import json
import os
import secrets
import statistics
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT))

import common  # noqa: E402
import cputime  # noqa: E402

# BENCH_OURS_DB / BENCH_OURS_PREFIX: a second copy of this adapter beside a running one
# (e.g. W4 while someone drains W2), each in its own database and under its own key prefix
# in Redis db 6; with a prefix of its own, reset() deletes only that prefix's keys.
DBNAME = os.environ.get("BENCH_OURS_DB", "bench_ours")
if "bench" not in DBNAME:
    raise SystemExit(f"BENCH_OURS_DB={DBNAME!r}: benchmark databases contain 'bench'")
REDIS_DB = 6
PREFIX = os.environ.get("BENCH_OURS_PREFIX", "bench")
# BENCH_OURS_BROKER=database: the database broker, no Redis at all (no REDIS_URL), the
# mode bench/db_broker_pairs.py holds against the PostgreSQL-only peers.
DATABASE_BROKER = os.environ.get("BENCH_OURS_BROKER", "redis") == "database"
ENV = {
    "DATABASE_URL": common.pg_url(DBNAME),
    **({"SCHEDULER_BROKER": "database"} if DATABASE_BROKER else {
        "REDIS_URL": f"redis://{common.REDIS_HOST}:{common.REDIS_PORT}/{REDIS_DB}"}),
    "SCHEDULER_REDIS_PREFIX": PREFIX,
    # DEBUG keeps every SQL query in memory: a daemon would slow down and grow.
    "DEBUG": "false",
    # With DEBUG off the daemons refuse the development key (docs/security.md).
    "SECRET_KEY": os.environ.get("SECRET_KEY") or secrets.token_urlsafe(50),
    "DJANGO_SETTINGS_MODULE": "scheduler_project.settings",
    **common.OURS_ENV,
}
for _key, _value in ENV.items():
    os.environ[_key] = _value

TABLES = ["runs_logline", "runs_attempt", "runs_run", "jobs_idempotencykey", "jobs_job",
          "jobs_schedule", "jobs_schedulerpartition", "runs_workerprocess", "runs_shardlease"]
WORKER_ARGS = ["runworker", "--concurrency", "2"]
# The async rows (bench/async_pairs.py): W2 drains bench.async_noop, W3 runs
# bench.async_stamp (a 50 ms awaited sleep).
ASYNC = bool(os.environ.get("BENCH_ASYNC"))


def _ensure_database() -> None:
    """Create bench_ours if missing (before Django connects to it)."""
    exists = common.pg_exec_sql("postgres",
                                f"SELECT 1 FROM pg_database WHERE datname = '{DBNAME}'")
    if not exists:
        common.pg_exec_sql("postgres", f'CREATE DATABASE "{DBNAME}"')


def _setup_django() -> None:
    import django

    django.setup()
    from jobs.registry import handler

    @handler("bench.stamp")
    def stamp(ctx, payload):
        """Return the handler's start as Unix seconds (float), stored as the run's result;
        with ``payload["items"]`` (int) a list of that many of it, for a mapped workflow
        node to run over (W7's ``map`` shape)."""
        if "items" in payload:
            return [time.time()] * int(payload["items"])
        return {"t": time.time()}

    @handler("bench.async_noop")
    async def async_noop(ctx, payload):
        """W2's async row (BENCH_ASYNC set: bench/async_pairs.py)."""
        return None

    @handler("bench.async_stamp")
    async def async_stamp(ctx, payload):
        """W3's async row: bench.stamp's start, then a 50 ms awaited sleep."""
        started = time.time()
        await asyncio.sleep(0.05)
        return {"t": started}


# --- shared steps ----------------------------------------------------------------------


def reset() -> None:
    """Migrate (a no-op when up to date), empty our tables and FLUSHDB Redis db 6 (only
    our prefix's keys under BENCH_OURS_PREFIX)."""
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE")
    if DATABASE_BROKER:
        return
    client = redis_client()
    if PREFIX == "bench":
        client.flushdb()
    else:
        keys = list(client.scan_iter(f"{PREFIX}:*", count=1000))
        for start in range(0, len(keys), 1000):
            client.delete(*keys[start:start + 1000])


def emit_result(workload: str, figure, unit: str, details: dict) -> None:
    """The contract's last stdout line."""
    common.emit_json({"workload": workload, "figure": figure, "unit": unit,
                      "details": details})


BROKER_NAME = "database broker, no Redis" if DATABASE_BROKER else "Redis broker"


def ready_count() -> int:
    """Runs ready to lease: in Redis' ready sets, or on the database broker the runs rows
    in state queued."""
    if DATABASE_BROKER:
        return scalar("SELECT count(*) FROM runs_run WHERE state = 'queued'")
    return sum(redis_client().zcard(k) for k in redis_client().scan_iter(f"{PREFIX}:*:ready"))


def redis_client():
    import redis

    return redis.Redis.from_url(ENV["REDIS_URL"])


def scalar(sql: str, params=None):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params or [])
        return cursor.fetchone()[0]


def create_jobs(count: int, batch: int = 10_000, **spec) -> float:
    """Store ``count`` jobs of ``spec`` (create_jobs keys) in batches; returns seconds."""
    from jobs import services

    began = time.perf_counter()
    for start in range(0, count, batch):
        n = min(batch, count - start)
        services.create_jobs([dict(spec, payload={"i": start + i}) for i in range(n)])
    elapsed = time.perf_counter() - began
    analyze()
    return elapsed


def analyze() -> None:
    """ANALYZE after a bulk load, as autovacuum would soon do on a stock PostgreSQL (it is
    off on these machines); procrastinate's adapter does the same. The bare loop of
    bench/ceiling.py shares this setup, so it is measured on the same statistics."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def daemon_cmd(*args: str) -> list[str]:
    """The command starting one daemon; with BENCH_PROFILE=DIR set, under pyinstrument,
    writing DIR/<command>.txt when the daemon stops."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--daemon", *args]
    profile_dir = os.environ.get("BENCH_PROFILE")
    if profile_dir:
        out = Path(profile_dir) / f"{args[0]}.txt"
        cmd[1:1] = ["-m", "pyinstrument", "-r", "text", "-o", str(out)]
    return cmd


class Daemons:
    """Our three daemons as subprocesses (each its own process group), logs to files."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.commands: dict[str, list[str]] = {}
        self.procs = []
        self.by_name = {}

    def start(self, name: str, *args: str):
        cmd = daemon_cmd(*args)
        self.commands[name] = cmd
        proc = common.spawn(cmd, env=dict(os.environ), cwd=ROOT,
                            log_path=self.log_dir / f"{name}.log")
        self.procs.append(proc)
        self.by_name[name] = proc
        return proc

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far of each daemon (and its children), PostgreSQL and Redis
        (bench/cputime.py)."""
        from django.db import connection

        return cputime.snapshot({name: proc.pid for name, proc in self.by_name.items()},
                                cputime.postmaster_pid(connection), REDIS_DB)

    def stop(self) -> None:
        """SIGTERM (graceful: a worker finishes or releases its runs), then SIGKILL."""
        for proc in self.procs:
            common.stop(proc, grace_s=10.0)
        self.procs = []

    def describe(self) -> dict:
        """The command lines, as a reader would type them."""
        # The key is a throwaway made per run, but a key-shaped string has no place in
        # the committed results.
        shown = {**ENV, "SECRET_KEY": "<random>"}
        env = " ".join(f"{k}={v}" for k, v in shown.items() if k != "DJANGO_SETTINGS_MODULE")
        return {name: f"{env} python manage.py {' '.join(cmd[cmd.index('--daemon') + 1:])}"
                for name, cmd in self.commands.items()}


def wait_worker_ready(timeout: float = 30) -> bool:
    """True once a worker has registered (it has forked its children and is leasing)."""
    return bool(common.wait_until(
        lambda: scalar("SELECT count(*) FROM runs_workerprocess WHERE stopped_at IS NULL"),
        timeout, 0.05))


def wait_dispatcher_ready(timeout: float = 30) -> bool:
    """True once a dispatcher holds a live shard lease (its first round has begun)."""
    return bool(common.wait_until(
        lambda: scalar("SELECT count(*) FROM runs_shardlease WHERE owner <> '' "
                       "AND lease_expires_at > now()"),
        timeout, 0.05))


def count_succeeded(extra: str = "", params=None) -> int:
    return scalar(f"SELECT count(*) FROM runs_run WHERE state = 'succeeded' {extra}", params)


def versions() -> dict:
    import django
    import psycopg
    import redis

    return {"django": django.get_version(), "redis-py": redis.__version__,
            "psycopg": psycopg.__version__, "python": sys.version.split()[0],
            "git": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                  capture_output=True, text=True).stdout.strip()}


# --- W1 ingest -------------------------------------------------------------------------


def w1(args) -> None:
    """Python bulk (create_jobs, batches of 10,000 or N), Python single (create_job per
    job), REST bulk (POST /api/jobs/bulk/, gunicorn 2 workers) and REST single
    (POST /api/jobs/, 2 client threads): one-off noop jobs due now."""
    import ingest  # bench/ingest.py: its gunicorn and HTTP helpers
    import requests
    from django.contrib.auth import get_user_model
    from django.db import connection

    from jobs import services
    from scheduler_core.rest.tokens import create_token

    n = args.n or (5000 if args.quick else 20_000)
    # One call per job is the slow path (~1-3 ms each): a sample gives its rate.
    n_single = min(n, 300 if args.quick else 5000)
    n_http_single = 200 if args.quick else 2000
    batch = min(10_000, n)
    details = {"n": n, "kind": "one-off noop jobs, run_at now (each a job row, a run row "
                                "and a Redis push)", "versions": versions()}

    def fresh():
        reset()
        owner, _ = get_user_model().objects.get_or_create(username="bench")
        return owner, create_token(owner)

    paths = set(args.paths.split(","))
    owner, _ = fresh()
    now = datetime.now(UTC)
    specs = [{"handler": "noop", "payload": {"i": i}, "run_at": now} for i in range(n)]
    began = time.perf_counter()
    for start in range(0, n, batch):
        services.create_jobs(specs[start:start + batch], owner=owner)
    wall = time.perf_counter() - began
    details["python_bulk"] = {"jobs_per_s": round(n / wall), "n": n, "batch": batch,
                              "wall_s": round(wall, 3)}
    assert scalar("SELECT count(*) FROM runs_run") == n

    if "python_single" not in paths:
        n_single = 0
    owner, _ = fresh()
    began = time.perf_counter()
    for i in range(n_single):
        services.create_job("noop", {"i": i}, owner=owner, run_at=now)
    wall = time.perf_counter() - began
    if n_single:
        details["python_single"] = {"jobs_per_s": round(n_single / wall), "n": n_single,
                                    "wall_s": round(wall, 3)}

    owner, token = fresh()
    connection.close()
    server, url = ingest.start_server(2)
    try:
        r = ingest.bench_http(n, batch, "one-off", token, url, 1)
        details["rest_bulk"] = {"jobs_per_s": r["jobs_per_s"], "n": n, "batch": batch,
                                "wall_s": r["wall_s"], "clients": 1, "gunicorn_workers": 2}
        body = json.dumps({"handler": "noop", "payload": {}, "run_at": now.isoformat()})
        headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
        if "rest_single" not in paths:
            n_http_single = 0
        left, lock, failures = [n_http_single], threading.Lock(), []

        def client():
            session = requests.Session()
            while True:
                with lock:
                    if left[0] <= 0:
                        return
                    left[0] -= 1
                response = session.post(f"{url}/api/jobs/", data=body, headers=headers,
                                        timeout=60)
                if response.status_code != 201:
                    failures.append(response.status_code)

        threads = [threading.Thread(target=client) for _ in range(2)]
        began = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - began
        if n_http_single:
            details["rest_single"] = {"jobs_per_s": round(n_http_single / wall),
                                      "n": n_http_single, "clients": 2,
                                      "gunicorn_workers": 2, "wall_s": round(wall, 3),
                                      "failures": len(failures)}
    finally:
        ingest.stop_server(server)
    best = max((k for k in ("python_bulk", "python_single", "rest_bulk", "rest_single")
                if k in details), key=lambda k: details[k]["jobs_per_s"])
    details["best_path"] = best
    emit_result("W1", details[best]["jobs_per_s"], "jobs/s", details)


# --- W2 drain --------------------------------------------------------------------------


def w2(args) -> None:
    """N noop runs ready in Redis (not timed); then start runworker --concurrency 2 (and
    the dispatcher); figure = N / seconds from the worker's start until all N succeeded
    (run row succeeded and its attempt row finished, both committed)."""
    n = args.n or (2000 if args.quick else 20_000)
    reset()
    daemons = Daemons(args.log_dir)
    try:
        # The dispatcher is a standing service, up before work arrives, as in a
        # deployment (and as no peer's W2 boots a scheduler on its clock): started and
        # holding its shards before the load, its start-up (0.65 s of CPU) no longer
        # competes with the worker's on the clock (BENCHMARKS.md, "W2 against the ceiling").
        daemons.start("dispatcher", "rundispatcher")
        if not wait_dispatcher_ready():
            raise SystemExit("W2: the dispatcher took no shard within 30 s")
        load_s = create_jobs(n, handler="bench.async_noop" if ASYNC else "noop",
                             run_at=datetime.now(UTC))
        ready = ready_count()
        cpu_before = daemons.cpu()
        began = time.monotonic()
        daemons.start("worker", *WORKER_ARGS)
        done = common.wait_until(lambda: count_succeeded() >= n, args.timeout, 0.05)
        wall = time.monotonic() - began
        cpu_us = cputime.per_run_us(cpu_before, daemons.cpu(), n)
    finally:
        daemons.stop()
    if not done:
        common.emit_json({"workload": "W2", "failed": f"only {count_succeeded()} of {n} "
                          f"succeeded within {args.timeout} s", "figure": None})
        return
    attempts = scalar("SELECT count(*) FROM runs_attempt WHERE outcome = 'succeeded'")
    # The drain without the worker's start-up (Python, Django, forking its children): from
    # the first lease to the last ack, on the database clock. bench/ceiling.py's bare loop
    # has no start-up, so this is the figure to hold against it (BENCHMARKS.md).
    drain_s = scalar("SELECT EXTRACT(EPOCH FROM max(finished_at) - min(started_at)) "
                     "FROM runs_run")
    details = {"n": n, "wall_s": round(wall, 3), "load_s": round(load_s, 3),
               "drain_s": round(float(drain_s), 3),
               "drain_runs_per_s": round(n / float(drain_s), 1),
               "ready_before_start": ready, "attempts_succeeded": attempts,
               "cpu_us_per_run": cpu_us, "load_1m": os.getloadavg()[0],
               "commands": daemons.describe(), "versions": versions(),
               "setup": f"{BROKER_NAME} (at-least-once: lease + fenced ack), 2 child "
                        "processes of one runworker; the clock includes the worker's start"}
    emit_result("W2", round(n / wall, 1), "jobs/s", details)


# --- W3 latency ------------------------------------------------------------------------


def w3(args) -> None:
    """116 jobs/s for 60 s (quick 15 s), each with run_at = submission + 2 s, handler
    bench.stamp; lag = handler start - run_at."""
    from jobs import services

    rate = args.rate or 116.0
    duration = args.duration or (15.0 if args.quick else 60.0)
    reset()
    daemons = Daemons(args.log_dir)
    try:
        daemons.start("dispatcher", "rundispatcher")
        daemons.start("worker", *WORKER_ARGS)
        if not wait_worker_ready():
            raise SystemExit("worker did not start")
        total = int(rate * duration)
        began = time.time()
        behind = 0.0
        for i in range(total):
            target = began + i / rate
            delay = target - time.time()
            if delay > 0:
                time.sleep(delay)
            else:
                behind = max(behind, -delay)
            at = datetime.fromtimestamp(time.time() + 2.0, UTC)
            services.create_job("bench.async_stamp" if ASYNC else "bench.stamp", {"i": i},
                                run_at=at)
        submit_s = time.time() - began
        common.wait_until(lambda: count_succeeded() >= total, 30, 0.1)
    finally:
        daemons.stop()
    from runs.models import Run

    lags = [(r["t"] - at.timestamp()) * 1000
            for at, r in Run.objects.filter(state="succeeded").values_list("run_at", "result")]
    missing = total - len(lags)
    details = {"rate": rate, "duration_s": duration, "count": len(lags), "missing": missing,
               "p50_ms": round(common.percentile(lags, 50), 1),
               "p99_ms": round(common.percentile(lags, 99), 1),
               "max_ms": round(max(lags), 1), "min_ms": round(min(lags), 1),
               "submit_s": round(submit_s, 2), "submitter_max_behind_s": round(behind, 3),
               "commands": daemons.describe(), "versions": versions(),
               "submit": "services.create_job(run_at=submission + 2 s), one call per job",
               "handler": "bench.stamp: returns time.time() at its start"}
    emit_result("W3", details["p99_ms"], "ms", details)


# --- W4 top of the minute --------------------------------------------------------------


def _top_of_minute(n: int, daemons: Daemons, timeout: float) -> dict:
    """Create ``n`` cron jobs ``* * * * *`` (bench.stamp) while the daemons run, so that
    they all fall due at the same boundary T; returns queued_s and started_s after T."""
    from django.db import connection

    # Creating 100 K jobs takes ~10 s: start early enough in a minute that every job's
    # next occurrence is the same boundary, well beyond the scheduler's lookahead.
    latest_second = max(0.0, 40.0 - n / 5000)
    while datetime.now(UTC).second + datetime.now(UTC).microsecond / 1e6 > latest_second:
        time.sleep(0.2)
    load_s = create_jobs(n, handler="bench.stamp", cron="* * * * *")
    lo, hi, count = None, None, 0
    with connection.cursor() as cursor:
        cursor.execute("SELECT min(next_run_at), max(next_run_at), count(*) FROM jobs_job")
        lo, hi, count = cursor.fetchone()
    if lo != hi or count != n:
        raise SystemExit(f"jobs not all due at one boundary: {lo} .. {hi} ({count})")
    boundary = lo.timestamp()
    client = redis_client()

    def zcards(kinds: tuple[str, ...]) -> int:
        return sum(client.zcard(k) for kind in kinds
                   for k in client.scan_iter(f"{PREFIX}:*:{kind}"))

    def queued() -> bool:
        # Every run in the run table and in the broker: the scheduler pushes after commit
        # into the delayed set (ready at T without further work), so every run still open
        # in PostgreSQL must be in Redis (delayed, ready or leased).
        in_db = scalar("SELECT count(*) FROM runs_run WHERE scheduled_at = %s", [lo])
        if in_db < n:
            return False
        open_runs = scalar("SELECT count(*) FROM runs_run WHERE scheduled_at = %s AND state "
                           "IN ('scheduled', 'queued', 'running')", [lo])
        return zcards(("delayed", "ready", "leased")) >= open_runs

    # Polled from the load on: the scheduler materialises up to LOOKAHEAD_S before T.
    queued_at = ready_at = None
    deadline = time.monotonic() + 120 + timeout
    while (queued_at is None or ready_at is None) and time.monotonic() < deadline:
        now = time.time()
        if queued_at is None and queued():
            queued_at = now
        # "ready": none left in the delayed set, i.e. every run promoted (the lease script
        # promotes a shard's due runs when a worker leases from it).
        if queued_at is not None and ready_at is None and now >= boundary \
                and zcards(("delayed",)) == 0:
            ready_at = now
        time.sleep(0.05)
    queued_s = queued_at - boundary if queued_at is not None else None
    ready_s = ready_at - boundary if ready_at is not None else None
    ok_s = common.wait_until(
        lambda: count_succeeded("AND scheduled_at = %s", [lo]) >= n, timeout, 0.1)
    from runs.models import Run

    stamps = [r["t"] for r in Run.objects.filter(scheduled_at=lo, state="succeeded")
              .values_list("result", flat=True)]
    started_s = (max(stamps) - boundary) if stamps else None
    first_s = (min(stamps) - boundary) if stamps else None
    materialised = scalar("SELECT extract(epoch FROM max(created_at)) FROM runs_run "
                          "WHERE scheduled_at = %s", [lo])
    return {"n": n, "load_s": round(load_s, 2),
            "queued_s": round(queued_s, 3) if queued_s is not None else None,
            "all_queued": queued_at is not None,
            "ready_s": round(ready_s, 3) if ready_s is not None else None,
            "last_materialised_s": round(float(materialised) - boundary, 3)
            if materialised is not None else None,
            "started_s": round(started_s, 3) if started_s else None,
            "first_started_s": round(first_s, 3) if first_s is not None else None,
            "all_started": bool(ok_s), "started_count": len(stamps),
            "boundary": lo.isoformat()}


def w4(args) -> None:
    """N cron jobs '* * * * *' due at the same minute; figure = started_s (s after the
    boundary until the last of the N handlers started). Without --quick, then again with
    --n-large (default 50,000) cron jobs: the largest N this machine was seen to hold."""
    n = args.n or (1000 if args.quick else 20_000)
    sizes = [n] if args.quick or args.n_large <= 0 else [n, args.n_large]
    results = []
    commands = {}
    for size in sizes:
        reset()
        daemons = Daemons(args.log_dir)
        try:
            daemons.start("scheduler", "runscheduler")
            daemons.start("dispatcher", "rundispatcher")
            daemons.start("worker", *WORKER_ARGS)
            wait_worker_ready()
            results.append(_top_of_minute(size, daemons, args.timeout))
            common.log(json.dumps(results[-1]))
        finally:
            daemons.stop()
            commands = daemons.describe()
    main = results[0]
    details = {"n": n, "queued_s": main["queued_s"], "started_s": main["started_s"],
               "ready_s": main["ready_s"], "runs": results, "commands": commands,
               "versions": versions(),
               "handler": "bench.stamp: returns time.time() at its start",
               "measures": "seconds after the boundary T (negative: before). queued_s: all "
                           "N runs in runs_run and in Redis (the scheduler materialises "
                           "up to LOOKAHEAD_S ahead into the delayed set); ready_s: the "
                           "delayed sets empty (promoted as workers lease); started_s: "
                           "the last handler's time.time(); last_materialised_s: the last "
                           "run's created_at"}
    if not main["all_started"]:
        common.emit_json({"workload": "W4", "figure": None, "failed": (
            f"{main['started_count']} of {n} started within {args.timeout} s"),
            "details": details})
        return
    emit_result("W4", main["started_s"], "s", details)


# --- W5 cost growth --------------------------------------------------------------------

DUE = 1000


def _load_cron_jobs(upto: int) -> None:
    """Grow the job table to ``upto`` active cron jobs (bench/w5_load.py)."""
    import w5_load
    from django.db import connection

    with connection.cursor() as cursor:
        w5_load.load_cron_jobs(cursor, upto, DUE)


def w5_ticks(repeat: int) -> None:
    """(Subprocess) time ``repeat`` Scheduler ticks, each materialising the same 1,000 due
    jobs; prints one JSON line: tick seconds, runs created, RSS."""
    from django.db import connection

    from jobs.schedules.scheduler import Scheduler
    from runs.brokers import get_broker

    scheduler = Scheduler()
    broker = get_broker()
    ticks, created = [], []
    for _ in range(repeat):
        # An occurrence at minute m+1 enters the 10 s lookahead after second 50: keep
        # every tick to the one occurrence of the current minute.
        while datetime.now(UTC).second >= 45:
            time.sleep(0.5)
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM runs_run")
            cursor.execute("UPDATE jobs_job SET next_run_at = date_trunc('minute', now()) "
                           "WHERE id <= %s", [DUE])
        broker.flush()
        began = time.perf_counter()
        created.append(scheduler.tick())
        ticks.append(time.perf_counter() - began)
    # The next size's process must find the partitions free, not leased for 15 s more.
    scheduler.shutdown()
    status = Path("/proc/self/status").read_text()
    mem = {line.split(":")[0]: int(line.split()[1]) for line in status.splitlines()
           if line.startswith(("VmRSS", "VmHWM"))}
    print(json.dumps({"ticks_s": ticks, "created": created, "rss_kb": mem["VmRSS"],
                      "hwm_kb": mem["VmHWM"]}), flush=True)


def w5(args) -> None:
    """Tick time and RSS of a scheduler process with 1 K, 100 K and 1 M active cron jobs
    (quick: 1 K, 10 K, 100 K) of which the same 1 K fall due; each size's ticks run in a
    fresh process (``ours.py --w5-ticks``) so its RSS is that size's own."""
    sizes = [1000, 10_000, 100_000] if args.quick else [1000, 100_000, 1_000_000]
    repeat = 3 if args.quick else 5
    reset()
    points = []
    for size in sizes:
        began = time.perf_counter()
        _load_cron_jobs(size)
        load_s = time.perf_counter() - began
        out = subprocess.run([sys.executable, __file__, "--w5-ticks", str(repeat)], cwd=ROOT,
                             env=dict(os.environ), capture_output=True, text=True,
                             timeout=args.timeout)
        if out.returncode:
            raise SystemExit(f"w5 ticks failed: {out.stderr[-2000:]}")
        data = json.loads(out.stdout.strip().splitlines()[-1])
        warm = data["ticks_s"][1:] or data["ticks_s"]
        points.append({"jobs": size, "due": DUE, "load_s": round(load_s, 2),
                       "tick_ms": round(statistics.median(warm) * 1000, 1),
                       "first_tick_ms": round(data["ticks_s"][0] * 1000, 1),
                       "ticks_ms": [round(t * 1000, 1) for t in data["ticks_s"]],
                       "runs_created": data["created"], "rss_mb": round(data["rss_kb"] / 1024, 1),
                       "peak_rss_mb": round(data["hwm_kb"] / 1024, 1)})
        common.log(json.dumps(points[-1]))
    ratio = points[-1]["tick_ms"] / points[0]["tick_ms"]
    details = {"points": points, "ratio_largest_to_smallest": round(ratio, 2),
               "tick": "jobs.schedules.scheduler.Scheduler.tick() in one process holding all 16 "
                       "partitions: claim the due jobs, insert 1,000 runs, advance them, "
                       "push to Redis; median of the ticks after the first",
               "versions": versions()}
    emit_result("W5", points[-1]["tick_ms"], "ms", details)


# --- W6 Redis memory -------------------------------------------------------------------


def w6(args) -> None:
    """Redis bytes per pending run: 50,000 one-off noop runs due now (in the ready set);
    figure = INFO used_memory delta / 50,000 (the server is shared: details also give the
    MEMORY USAGE of our own keys, which no other client touches)."""
    n = args.n or 50_000
    reset()
    client = redis_client()
    client.set(f"{PREFIX}:warm", "1")  # the db's dict exists before the first reading
    before = client.info("memory")["used_memory"]
    create_jobs(n, handler="noop", run_at=datetime.now(UTC))
    after = client.info("memory")["used_memory"]
    keys = list(client.scan_iter(f"{PREFIX}:*"))
    usage = {k.decode(): client.memory_usage(k, samples=0) for k in keys}
    pending = sum(client.zcard(k) for k in keys if k.endswith(b":ready"))
    details = {"n": n, "pending_in_redis": pending, "used_memory_before": before,
               "used_memory_after": after, "memory_usage_of_keys": usage,
               "bytes_per_run_memory_usage": round(sum(usage.values()) / n, 1),
               "layout": "one ZSET member per pending run (ready: id -> priority*2^42 + "
                         "run_at_ms); the payload stays in PostgreSQL"}
    emit_result("W6", round((after - before) / n, 1), "bytes/run", details)


WORKLOADS = {"W1": w1, "W2": w2, "W3": w3, "W4": w4, "W5": w5, "W6": w6}


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--daemon":
        _setup_django()
        from django.core.management import execute_from_command_line

        execute_from_command_line(["manage.py", *sys.argv[2:]])
        return
    if len(sys.argv) > 2 and sys.argv[1] == "--w5-ticks":
        _setup_django()
        w5_ticks(int(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(description="Our side of bench/ (bench/run.py).")
    parser.add_argument("workload", choices=sorted(WORKLOADS))
    parser.add_argument("--n", type=int, default=None)
    # 100,000 does not fit on this 2-core machine: the scheduler materialised 83,000 of
    # them for the boundary before the next minute's occurrences fell within its
    # lookahead, and the misfire policy (run_once) folded the other 17,000 into those.
    parser.add_argument("--n-large", type=int, default=50_000,
                        help="W4: the second, larger N (0: skip); default the largest N "
                             "seen to fit here")
    parser.add_argument("--rate", type=float, default=None)
    parser.add_argument("--duration", type=float, default=None)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--paths", default="python_bulk,python_single,rest_bulk,rest_single",
                        help="W1: the ingest paths to time (bench/run.py's pairs time the "
                             "two bulk paths)")
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp/bench-ours-logs"))
    args = parser.parse_args()
    args.log_dir.mkdir(parents=True, exist_ok=True)
    common.install_signal_handlers()
    common.compile_sources()
    _ensure_database()
    _setup_django()
    WORKLOADS[args.workload](args)


if __name__ == "__main__":
    main()
