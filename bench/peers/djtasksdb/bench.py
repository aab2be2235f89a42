"""django-tasks-db adapter of the benchmark: W1 and W2 through django.tasks (the adapter
contract is in bench/run.py's docstring; the shared driver is bench/djtasks_peer.py).

Run with the peer's own virtualenv:
    bench/.venvs/djtasksdb/bin/python bench/peers/djtasksdb/bench.py W2 [--n N] [--variant V]

Setup per django-tasks-db's README (https://github.com/RealOrangeOne/django-tasks-db#readme):
a tiny Django project (benchdjt/settings.py) with its DatabaseBackend as TASKS' default and
the results table in PostgreSQL database bench_djtasksdb (dropped, created and migrated per
run). Two ``manage.py db_worker`` processes (BENCHMARKS.md, "Rules"), each running one
task per transaction. default: its defaults (``--interval 1``, a random start-up delay
under 1 s). tuned: ``--no-startup-delay --interval 0.1``: the worker has no other
throughput option (no prefetch, no concurrency: one task at a time per process), and the
start-up delay and idle poll are on the clock. Every result is kept (a DBTaskResult row).
"""

import os
import sys
from importlib.metadata import version
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))  # bench/: common, djtasks_peer, bench_tasks
sys.path.insert(0, str(HERE))
os.environ["DJANGO_SETTINGS_MODULE"] = "benchdjt.settings"

import djtasks_peer  # noqa: E402

WORKER = [sys.executable, "manage.py", "db_worker"]
TUNED = WORKER + ["--no-startup-delay", "--interval", "0.1"]


def left() -> int:
    from django_tasks_db.models import DBTaskResult

    return DBTaskResult.objects.exclude(status="SUCCESSFUL").count()


if __name__ == "__main__":
    djtasks_peer.run(djtasks_peer.Peer(
        name="djtasksdb", here=HERE, dbname="bench_djtasksdb",
        workers={"default": ([WORKER] * 2, {}), "tuned": ([TUNED] * 2, {})},
        config={"default": "2 x manage.py db_worker (interval 1 s, start-up delay), "
                           "DatabaseBackend on PostgreSQL",
                "tuned": "2 x manage.py db_worker --no-startup-delay --interval 0.1, "
                         "DatabaseBackend on PostgreSQL"},
        durable_history=True,
        history="durable: a DBTaskResult row per task (status SUCCESSFUL), in PostgreSQL",
        left=left,
        versions={"django-tasks-db": version("django-tasks-db"),
                  "django": version("django")}))
