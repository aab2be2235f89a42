"""django-tasks-scheduler adapter of the benchmark: the cron workload W4 (the adapter
contract is in bench/run.py's docstring).

Run with the peer's own virtualenv:
    bench/.venvs/dtscheduler/bin/python bench/peers/dtscheduler/bench.py W4 [--n N] [--variant V]

Setup per its docs (https://django-tasks-scheduler.readthedocs.io/en/latest/, "Installation"
and "Configuration"): a tiny Django project (benchdts/settings.py), task rows in PostgreSQL
database bench_dtscheduler (dropped, created and migrated per run), one queue on Redis db 8
(FLUSHDB per run). N cron tasks ``* * * * *`` (its Task model, task_type CronTaskType) are
created by ``bulk_create`` early in a minute; two ``manage.py scheduler_worker`` processes
(BENCHMARKS.md, "Rules"), whose scheduler (one holds its lock) gives every enabled task
without a pending job its next occurrence when it starts, then moves due jobs to the queue
every SCHEDULER_INTERVAL (10 s). default: its defaults (each job executed in a forked
process). tuned: ``--fork-job-execution false`` (the job runs in the worker process, as
RQ's SimpleWorker; the worker's documented option). T is the first minute boundary at
least 30 s after the workers start; the figure is when the N-th execution after T started.
History: executions are RQ-style job hashes in Redis with a result TTL (10 minutes by
default), not durable. W5 is not measured: its scheduler keeps no per-tick state to time
apart from the worker's loop, and loading 1 M tasks through its models was not done.
"""

import os
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))  # bench/ for common
sys.path.insert(0, str(HERE))
os.environ["DJANGO_SETTINGS_MODULE"] = "benchdts.settings"

import common  # noqa: E402

DBNAME = "bench_dtscheduler"
REDIS_DB = 8
WORKER = [sys.executable, "manage.py", "scheduler_worker"]
VARIANTS = {"default": [], "tuned": ["--fork-job-execution", "false"]}
CONFIG = {
    "default": "2 x manage.py scheduler_worker (a forked process per job), "
               "SCHEDULER_INTERVAL 10 s, Redis db 8",
    "tuned": "2 x manage.py scheduler_worker --fork-job-execution false, "
             "SCHEDULER_INTERVAL 10 s, Redis db 8",
}
HISTORY = ("Redis only: job hashes and results expire (DEFAULT_SUCCESS_TTL 10 min); the "
           "task rows in PostgreSQL keep the schedule, not the outcomes")


def w4(args, logdir: Path) -> dict:
    n = common.default_n(args)
    common.pg_recreate_database(DBNAME)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=HERE,
                   check=True, timeout=300)
    common.redis_flushdb(REDIS_DB)
    import django

    django.setup()
    from scheduler.models import Task, TaskType

    # Created early in a minute so the boundary after the workers' start is the first
    # occurrence of every task.
    second = time.time() % 60
    if second > 15:
        time.sleep(60 - second + 1)
    began = time.perf_counter()
    for start in range(0, n, 5000):
        Task.objects.bulk_create([
            Task(name=f"t{i}", task_type=TaskType.CRON, callable="benchdts.tasks.tick",
                 cron_string="* * * * *", queue="default")
            for i in range(start, min(n, start + 5000))])
    load_s = time.perf_counter() - began
    starts = logdir / "starts.txt"
    env = dict(os.environ, BENCH_STARTS_FILE=str(starts), PYTHONPATH=str(HERE))
    procs = [common.spawn(WORKER + VARIANTS[args.variant] + ["--name", f"bench{i}"],
                          env=env, cwd=HERE, log_path=logdir / f"worker{i}.log")
             for i in range(2)]
    boundary = common.next_minute_boundary(min_lead_s=30.0)

    def after():
        try:
            return sorted(t for t in map(float, starts.read_text().split()) if t >= boundary)
        except FileNotFoundError:
            return []

    try:
        done = common.wait_until(lambda: len(after()) >= n,
                                 boundary + 300 - time.time(), 0.5)
    finally:
        for proc in procs:
            common.stop(proc)
    seen = after()
    details = {"n": n, "boundary_epoch": boundary, "load_s": round(load_s, 2),
               "started": len(seen),
               "started_s": round(seen[n - 1] - boundary, 3) if len(seen) >= n else None,
               "first_started_s": round(seen[0] - boundary, 3) if seen else None,
               "registered": f"{n} Task rows (CronTaskType '* * * * *') by bulk_create",
               "versions": {"django-tasks-scheduler": version("django-tasks-scheduler"),
                            "django": version("django")},
               "hardware": common.hardware(),
               **common.row_facts(args.variant, CONFIG[args.variant], False, HISTORY)}
    if not done:
        return {"workload": "W4", "figure": None, "details": details,
                "failed": f"{len(seen)} of {n} started within 300 s of the boundary"}
    return {"workload": "W4", "figure": details["started_s"], "unit": "s",
            "details": details}


def main() -> None:
    args = common.base_parser(__doc__.split("\n")[0]).parse_args()
    common.install_signal_handlers()
    if args.workload != "W4":
        common.emit_json({"workload": args.workload, "unsupported":
                          "django-tasks-scheduler is measured on the cron workload W4"})
        return
    try:
        with tempfile.TemporaryDirectory(prefix="bench-dtscheduler-") as logdir:
            result = w4(args, Path(logdir))
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        result = {"workload": "W4", "figure": None, "failed": repr(exc)}
    finally:
        common.kill_all()
    common.emit_json(result)


if __name__ == "__main__":
    main()
