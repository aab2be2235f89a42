"""Isolation under load (docs/isolation.md): the three failure modes of a shared scheduler, measured
with the real daemons on PostgreSQL + Redis.

    .venv/bin/python bench/isolation.py [--quick] [--only flood,owner,dispatch]

* flood: 100,000 low-priority (9) runs ready, then 1,000 high-priority (0) runs due at
  paced instants (50/s); the high runs' lag (lease time minus run_at) p50/p99/max, with
  and without the flood, and how many low runs still started meanwhile.
* owner: one owner with 50,000 ready runs (handler ``sleep`` 0.05 s) and a limit of 4
  beside another owner with 100 no-op runs due at paced instants (10/s); the second
  owner's lag, with the limit and without it, and the most runs of the first owner seen
  running at once. Both owners' jobs share one shard key, so they meet in one shard.
* dispatch: 100,000 runs over 8 shards all due at one instant; runs promoted per second
  with 1, 2 and 4 dispatchers (no workers).

Resources: PostgreSQL database ``bench_isolation`` (created and migrated when missing,
emptied before each case), Redis db 7, key prefix ``iso``. Worker: ``runworker
--concurrency 2`` (8 for the owner case, so that a limit of 4 binds). Lag is measured at
the lease (``runs_run.started_at``), which is what the broker's fairness controls.
Results go to bench/results/isolation.json; BENCHMARKS.md quotes them.
"""

import argparse
import json
import os
import secrets
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT))

import common  # noqa: E402

DBNAME = "bench_isolation"
ENV = {
    "DATABASE_URL": common.pg_url(DBNAME),
    "REDIS_URL": f"redis://{common.REDIS_HOST}:{common.REDIS_PORT}/7",
    "SCHEDULER_REDIS_PREFIX": "iso",
    "DEBUG": "false",
    # With DEBUG off the daemons refuse the development key (docs/security.md).
    "SECRET_KEY": os.environ.get("SECRET_KEY") or secrets.token_urlsafe(50),
    "DJANGO_SETTINGS_MODULE": "scheduler_project.settings",
    **common.OURS_ENV,
    "SCHEDULER_SHARDS": "8",
}
os.environ.update(ENV)
TABLES = ["runs_logline", "runs_attempt", "runs_run", "jobs_job", "jobs_schedule",
          "jobs_ownerpolicy", "runs_workerprocess", "runs_shardlease", "jobs_leasemember",
          "runs_ratebucket"]


def setup() -> None:
    if not common.pg_exec_sql("postgres",
                              f"SELECT 1 FROM pg_database WHERE datname = '{DBNAME}'"):
        common.pg_exec_sql("postgres", f'CREATE DATABASE "{DBNAME}"')
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def reset() -> None:
    """Empty our tables and FLUSHDB Redis db 7."""
    import redis
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE")
        cursor.execute("DELETE FROM auth_user WHERE username LIKE 'iso-%%'")
    redis.Redis.from_url(ENV["REDIS_URL"]).flushdb()


def scalar(sql: str, params=None):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params or [])
        return cursor.fetchone()[0]


def rows(sql: str, params=None) -> list[tuple]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params or [])
        return cursor.fetchall()


def create(count: int, owner=None, batch: int = 10_000, **spec) -> None:
    """Store ``count`` one-off jobs of ``spec``; a callable value is called with the
    job's index (e.g. paced ``run_at``)."""
    from jobs import services

    for start in range(0, count, batch):
        n = min(batch, count - start)
        services.create_jobs(
            [{k: v(start + i) if callable(v) else v for k, v in spec.items()}
             for i in range(n)], owner=owner)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runs_run; ANALYZE jobs_job")  # autovacuum is off here


class Daemons:
    def __init__(self, name: str):
        self.name, self.procs = name, []

    def start(self, *args: str, env: dict | None = None):
        log = ROOT / "bench" / "results" / "logs" / f"isolation-{self.name}-{len(self.procs)}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        proc = common.spawn([sys.executable, "manage.py", *args],
                            env={**os.environ, **(env or {})}, cwd=ROOT, log_path=log)
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in self.procs:
            common.stop(proc, grace_s=10.0)
        self.procs = []


def wait_worker() -> None:
    common.wait_until(lambda: scalar(
        "SELECT count(*) FROM runs_workerprocess WHERE stopped_at IS NULL"), 60)


def lags(where: str, params=None) -> dict:
    """Lag (started_at - run_at, seconds) of the runs matching ``where``."""
    values = [r[0] for r in rows(
        f"SELECT EXTRACT(EPOCH FROM r.started_at - r.run_at) FROM runs_run r "
        f"JOIN jobs_job j ON j.id = r.job_id WHERE r.started_at IS NOT NULL AND {where}",
        params)]
    values = [float(v) for v in values]
    pick = lambda p: round(common.percentile(values, p), 4) if values else None  # noqa: E731
    return {"count": len(values), "p50_s": pick(50), "p99_s": pick(99),
            "max_s": round(max(values), 4) if values else None}


def now() -> datetime:
    return datetime.now(UTC)


# --- cases -----------------------------------------------------------------------------


def flood_case(flood: int, high: int, rate: float) -> dict:
    reset()
    if flood:
        create(flood, handler="noop", priority=9, run_at=now())
    daemons = Daemons(f"flood{flood}")
    try:
        daemons.start("rundispatcher")
        daemons.start("runworker", "--concurrency", "2")
        wait_worker()
        time.sleep(2)
        t0 = now() + timedelta(seconds=3)
        create(high, handler="noop", priority=0,
               run_at=lambda i: t0 + timedelta(seconds=i / rate))
        done = common.wait_until(lambda: scalar(
            "SELECT count(*) FROM runs_run WHERE priority = 0 AND state = 'succeeded'")
            >= high, 60 + high / rate)
        t_end = now()
        low_during = scalar(
            "SELECT count(*) FROM runs_run WHERE priority = 9 AND started_at BETWEEN %s AND %s",
            [t0, t_end])
    finally:
        daemons.stop()
    return {"flood": flood, "high": high, "high_rate_per_s": rate, "completed": bool(done),
            "high_lag": lags("r.priority = 0"),
            "low_started_meanwhile": low_during,
            "window_s": round((t_end - t0).total_seconds(), 2)}


def owner_case(noisy_runs: int, quiet_runs: int, limit: int | None, watch_s: float) -> dict:
    from django.contrib.auth.models import User

    from jobs.tenants import set_owner_policy

    reset()
    noisy = User.objects.create_user("iso-noisy")
    quiet = User.objects.create_user("iso-quiet")
    if limit:
        set_owner_policy(noisy, max_running=limit)
    # One shard key for both owners: otherwise the worker's rotation over shards would
    # separate them by handler, and the limit would not be what is measured.
    create(noisy_runs, owner=noisy, handler="sleep", payload={"seconds": 0.05}, run_at=now(),
           shard_key="shared")
    daemons = Daemons(f"owner{limit}")
    peak = 0
    try:
        daemons.start("rundispatcher")
        daemons.start("runworker", "--concurrency", "8")
        wait_worker()
        t0 = now() + timedelta(seconds=3)
        create(quiet_runs, owner=quiet, handler="noop", shard_key="shared",
               run_at=lambda i: t0 + timedelta(seconds=i / 10))
        deadline = time.monotonic() + watch_s
        while time.monotonic() < deadline:
            peak = max(peak, scalar(
                "SELECT count(*) FROM runs_run r JOIN jobs_job j ON j.id = r.job_id "
                "WHERE r.state = 'running' AND j.owner_id = %s", [noisy.pk]))
            if scalar("SELECT count(*) FROM runs_run r JOIN jobs_job j ON j.id = r.job_id "
                      "WHERE r.state = 'succeeded' AND j.owner_id = %s",
                      [quiet.pk]) >= quiet_runs:
                break
            time.sleep(0.05)
    finally:
        daemons.stop()
    return {"limit": limit, "noisy_runs": noisy_runs, "quiet_runs": quiet_runs,
            "quiet_lag": lags("j.owner_id = %s", [quiet.pk]),
            "quiet_started": scalar(
                "SELECT count(*) FROM runs_run r JOIN jobs_job j ON j.id = r.job_id "
                "WHERE r.started_at IS NOT NULL AND j.owner_id = %s", [quiet.pk]),
            "noisy_peak_running": peak, "watched_s": watch_s}


def dispatch_case(n: int, dispatchers: int) -> dict:
    reset()
    t_due = now() + timedelta(seconds=n / 8000 + 15)
    create(n, handler="noop", run_at=t_due, shard_key=lambda i: f"key{i % 64}")
    daemons = Daemons(f"dispatch{dispatchers}")
    try:
        for _ in range(dispatchers):
            daemons.start("rundispatcher", env={"SCHEDULER_SHARD_LEASE_TTL_S": "3"})
        # The dispatchers split the shards within a renewal or two (1 s each).
        time.sleep(max((t_due - now()).total_seconds(), 0))
        began = time.monotonic()
        done = common.wait_until(lambda: scalar(
            "SELECT count(*) FROM runs_run WHERE state = 'queued'") >= n, 300, 0.05)
        elapsed = time.monotonic() - began
        owners = rows("SELECT owner, count(*) FROM runs_shardlease "
                      "WHERE lease_expires_at > now() GROUP BY owner")
    finally:
        daemons.stop()
    return {"runs": n, "dispatchers": dispatchers, "completed": bool(done),
            "seconds": round(elapsed, 3), "runs_per_s": round(n / elapsed),
            "shards_per_dispatcher": sorted(count for _, count in owners)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--only", default="flood,owner,dispatch")
    args = parser.parse_args()
    common.install_signal_handlers()
    setup()
    only = set(args.only.split(","))
    scale = 10 if args.quick else 1
    results: dict = {"hardware": common.hardware(), "quick": args.quick,
                     "command": " ".join(["python", "bench/isolation.py", *sys.argv[1:]])}
    if "flood" in only:
        results["flood"] = [flood_case(100_000 // scale, 1000 // scale, 50.0),
                            flood_case(0, 1000 // scale, 50.0)]
        common.log(json.dumps(results["flood"], indent=1))
    if "owner" in only:
        results["owner"] = [owner_case(50_000 // scale, 100, 4, 60.0),
                            owner_case(50_000 // scale, 100, None, 40.0)]
        common.log(json.dumps(results["owner"], indent=1))
    if "dispatch" in only:
        results["dispatch"] = [dispatch_case(100_000 // scale, k) for k in (1, 2, 4)]
        common.log(json.dumps(results["dispatch"], indent=1))
    out = BENCH / "results" / ("isolation-quick.json" if args.quick else "isolation.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    common.emit_json({"workload": "isolation", "results": str(out)})


if __name__ == "__main__":
    main()
