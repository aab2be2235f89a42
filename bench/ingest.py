"""Ingest benchmark (BENCHMARKS.md, "Ingest (W1)"): how many jobs per second the Python bulk
API (``jobs.services.create_jobs``) and the REST bulk endpoint (``POST /api/jobs/bulk/``)
store, PostgreSQL and Redis included (one-off runs are pushed to the broker before the
call returns). The target is 10,000 jobs/s on the project's 2-core machine.

Usage (a database of its own: ``--reset`` empties the jobs and runs tables and the Redis
keys under SCHEDULER_REDIS_PREFIX, and refuses a database whose name lacks "bench")::

    createdb -h 127.0.0.1 -U postgres scheduler_bench
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/scheduler_bench \\
    REDIS_URL=redis://127.0.0.1:6379/6 SCHEDULER_REDIS_PREFIX=bench \\
        .venv/bin/python bench/ingest.py --mode both --jobs 100000 --batch 10000 --reset

``--mode python`` calls create_jobs in this process; ``--mode http`` starts gunicorn
(``--server-workers`` processes) on a free port and POSTs ``--batch`` jobs per request from
``--clients`` threads; ``both`` runs one after the other. ``--kind`` picks one-off jobs
(run_at within the next hour: a job, a run and a broker push each), recurring jobs (cron
and timezone from a set of 60 x 4 distinct pairs: a schedule and a job each) or ``mixed``
(half and half). ``--profile`` writes a pyinstrument profile of the Python mode to
ingest-profile.html in the temporary directory (pip install pyinstrument).

Each phase starts from empty tables and reports jobs/s over the wall time of all calls,
with the median and the slowest call; the data is checked afterwards (every job stored,
every one-off run in Redis).
"""

import argparse
import json
import os
import platform
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_project.settings")

import common  # noqa: E402

for _key, _value in common.OURS_ENV.items():
    os.environ.setdefault(_key, _value)

import django  # noqa: E402

django.setup()

import redis  # noqa: E402
import requests  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from jobs import services  # noqa: E402
from jobs.models import Job  # noqa: E402
from runs.models import Run  # noqa: E402
from scheduler_core import conf  # noqa: E402
from scheduler_core.rest.tokens import create_token  # noqa: E402

CRONS = [f"{m} * * * *" for m in range(60)]
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo"]
TABLES = ["runs_logline", "runs_attempt", "runs_run", "jobs_idempotencykey", "jobs_job",
          "jobs_schedule"]


def job_items(count: int, kind: str, offset: int, api: bool) -> list[dict]:
    """``count`` job definitions: the REST API's form when ``api``, else create_jobs'."""
    now = datetime.now(UTC)
    items = []
    for i in range(offset, offset + count):
        recurring = kind == "cron" or (kind == "mixed" and i % 2)
        item = {"handler": "noop", "payload": {"invoice": i, "customer": f"c-{i % 977}"},
                "name": f"bench {i}"}
        if recurring:
            item.update({"cron": CRONS[i % len(CRONS)], "timezone": ZONES[i % len(ZONES)]})
        else:
            run_at = now + timedelta(seconds=60 + i % 3600)
            item["run_at"] = run_at.isoformat() if api else run_at
        items.append(item)
    return items


def reset() -> None:
    """Empty the job and run tables and this prefix's Redis keys."""
    name = connection.settings_dict["NAME"]
    if "bench" not in str(name):
        sys.exit(f"--reset refuses database {name!r}: its name must contain 'bench'")
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE")
    client = redis.Redis.from_url(settings.REDIS_URL)
    keys = list(client.scan_iter(match=f"{conf.get('REDIS_PREFIX')}:*", count=1000))
    for start in range(0, len(keys), 1000):
        client.delete(*keys[start:start + 1000])


def report(label: str, total: int, wall: float, calls: list[float],
           cpu: float | None = None) -> dict:
    """Print one phase's result as a JSON line; ``load_1m`` is the machine's load average
    at the end (the benchmark itself and PostgreSQL count in it; other processes share the
    2 cores too); ``python_cpu_s`` the CPU seconds this process spent (Python mode)."""
    result = {"phase": label, "jobs": total, "wall_s": round(wall, 3),
              "jobs_per_s": round(total / wall), "calls": len(calls),
              "median_call_s": round(statistics.median(calls), 3),
              "slowest_call_s": round(max(calls), 3), "load_1m": round(os.getloadavg()[0], 2)}
    if cpu is not None:
        result["python_cpu_s"] = round(cpu, 3)
    print(json.dumps(result), flush=True)
    return result


def verify(total: int, kind: str) -> None:
    """Every job stored, and every one-off run in the broker's delayed or ready set."""
    jobs = Job.objects.count()
    runs = Run.objects.count()
    client = redis.Redis.from_url(settings.REDIS_URL)
    prefix = conf.get("REDIS_PREFIX")
    in_redis = sum(client.zcard(k) for k in client.scan_iter(match=f"{prefix}:*:delayed"))
    in_redis += sum(client.zcard(k) for k in client.scan_iter(match=f"{prefix}:*:ready"))
    expected_runs = {"one-off": total, "cron": 0, "mixed": total // 2}[kind]
    ok = jobs == total and runs == expected_runs and in_redis == expected_runs
    print(json.dumps({"check": "ok" if ok else "MISMATCH", "jobs": jobs, "runs": runs,
                      "runs_in_redis": in_redis, "expected_runs": expected_runs}), flush=True)
    if not ok:
        sys.exit(1)


def bench_python(total: int, batch: int, kind: str, owner, profile: bool) -> dict:
    batches = [job_items(min(batch, total - start), kind, start, api=False)
               for start in range(0, total, batch)]
    profiler = None
    if profile:
        from pyinstrument import Profiler

        profiler = Profiler()
        profiler.start()
    calls = []
    began, cpu = time.perf_counter(), time.process_time()
    for specs in batches:
        t0 = time.perf_counter()
        services.create_jobs(specs, owner=owner)
        calls.append(time.perf_counter() - t0)
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    if profiler is not None:
        profiler.stop()
        out = Path(tempfile.gettempdir()) / "ingest-profile.html"
        out.write_text(profiler.output_html())
        print(f"profile written to {out}", file=sys.stderr)
    return report(f"python create_jobs, batches of {batch}, {kind}", total, wall, calls, cpu)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(workers: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    argv = [sys.executable, "-m", "gunicorn", "scheduler_project.wsgi:application",
            "--workers", str(workers), "--bind", f"127.0.0.1:{port}", "--timeout", "300",
            "--log-level", "warning"]
    # gunicorn refuses the development key and an empty ALLOWED_HOSTS (docs/security.md).
    env = {"SECRET_KEY": secrets.token_urlsafe(50), "ALLOWED_HOSTS": "127.0.0.1",
           **os.environ}
    server = subprocess.Popen(argv, cwd=ROOT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{url}/readyz", timeout=5).status_code == 200:
                return server, url
        except requests.RequestException:
            pass  # not listening yet, or too busy starting to answer in time
        time.sleep(0.2)
    stop_server(server)
    sys.exit("gunicorn did not become ready within 60 s")


def stop_server(server: subprocess.Popen) -> None:
    """Stop gunicorn and its workers (its own process group), forcibly after 30 s."""
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def bench_http(total: int, batch: int, kind: str, token: str, url: str, clients: int) -> dict:
    bodies = [json.dumps({"jobs": job_items(min(batch, total - start), kind, start, api=True)})
              .encode() for start in range(0, total, batch)]
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
    calls, failures, lock = [], [], threading.Lock()
    pending = list(reversed(bodies))

    def client():
        session = requests.Session()
        while True:
            with lock:
                if not pending:
                    return
                body = pending.pop()
            t0 = time.perf_counter()
            response = session.post(f"{url}/api/jobs/bulk/", data=body, headers=headers,
                                    timeout=300)
            elapsed = time.perf_counter() - t0
            with lock:
                calls.append(elapsed)
                if response.status_code != 201:
                    failures.append(f"{response.status_code} {response.text[:300]}")

    threads = [threading.Thread(target=client) for _ in range(clients)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    if failures:
        sys.exit(f"{len(failures)} requests failed, e.g. {failures[0]}")
    return report(f"http POST /api/jobs/bulk/, {batch} per request, {clients} client(s), "
                  f"{kind}", total, wall, calls)


def hardware() -> str:
    model = next((line.split(":", 1)[1].strip() for line in
                  subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
                  if line.startswith("Model name")), platform.processor())
    return f"{os.cpu_count()} CPUs ({model}), Python {platform.python_version()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["python", "http", "both"], default="both")
    parser.add_argument("--kind", choices=["one-off", "cron", "mixed"], default="mixed")
    parser.add_argument("--jobs", type=int, default=100_000, help="jobs per phase")
    parser.add_argument("--batch", type=int, default=10_000, help="jobs per call / request")
    parser.add_argument("--clients", type=int, default=1, help="concurrent HTTP clients")
    parser.add_argument("--server-workers", type=int, default=2, help="gunicorn workers")
    parser.add_argument("--reset", action="store_true",
                        help="empty the job/run tables and Redis keys before each phase")
    parser.add_argument("--profile", action="store_true", help="pyinstrument the python mode")
    args = parser.parse_args()
    if not settings.REDIS_URL:
        sys.exit("set REDIS_URL: the benchmark measures the Redis broker")
    call_command("migrate", verbosity=0)
    owner, _ = get_user_model().objects.get_or_create(username="bench")
    token = create_token(owner)
    print(json.dumps({"hardware": hardware(), "database": connection.settings_dict["NAME"],
                      "broker": conf.broker_name(), "args": vars(args)}), flush=True)
    if args.mode in ("python", "both"):
        if args.reset:
            reset()
        bench_python(args.jobs, args.batch, args.kind, owner, args.profile)
        verify(args.jobs, args.kind)
    if args.mode in ("http", "both"):
        if args.reset:
            reset()
        connection.close()
        server, url = start_server(args.server_workers)
        try:
            bench_http(args.jobs, args.batch, args.kind, token, url, args.clients)
        finally:
            stop_server(server)
        verify(args.jobs, args.kind)


if __name__ == "__main__":
    main()
