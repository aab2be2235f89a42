"""django-vtasks adapter of the benchmark, database backend: W1 and W2 through django.tasks
(the adapter contract is in bench/run.py's docstring; the shared driver is
bench/djtasks_peer.py; the Valkey backend's rows are bench/peers/vtasksvk).

Run with the peer's own virtualenv:
    bench/.venvs/vtasks/bin/python bench/peers/vtasks/bench.py W2 [--n N] [--variant V]

Setup per django-vtasks' README quick start (https://pypi.org/project/django-vtasks/): a
tiny Django project (benchvt/settings.py) with its database backend on PostgreSQL
(database bench_vtasks, dropped, created and migrated per run); two ``manage.py
runworker`` processes (BENCHMARKS.md, "Rules"). default: its defaults (asyncio, 20
concurrent tasks per worker). tuned: VTASKS_CONCURRENCY=100, the README's "Queue
configuration": "a high VTASKS_CONCURRENCY is ideal for cheap I/O-bound tasks". W1's and
W2's enqueue use ``enqueue_many``, its documented bulk call. Its other documented
throughput option, a batch queue (the task receives a list of jobs), is a different
programming model from one call per job and is not measured. django-vtasks deletes a
task's row when it succeeds (no result is kept), so done is an empty queue table.
"""

import os
import sys
from importlib.metadata import version
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))  # bench/: common, djtasks_peer, bench_tasks
sys.path.insert(0, str(HERE))
os.environ["DJANGO_SETTINGS_MODULE"] = "benchvt.settings"
os.environ["BENCH_VTASKS_BACKEND"] = "db"

import djtasks_peer  # noqa: E402

WORKER = [sys.executable, "manage.py", "runworker"]


def left() -> int:
    from django_vtasks.db.models import QueuedTask

    return QueuedTask.objects.count()


if __name__ == "__main__":
    djtasks_peer.run(djtasks_peer.Peer(
        name="vtasks", here=HERE, dbname="bench_vtasks",
        workers={"default": ([WORKER] * 2, {}),
                 "tuned": ([WORKER] * 2, {"VTASKS_CONCURRENCY": "100"})},
        config={"default": "2 x manage.py runworker (asyncio, VTASKS_CONCURRENCY 20), "
                           "database backend on PostgreSQL",
                "tuned": "2 x manage.py runworker with VTASKS_CONCURRENCY=100, database "
                         "backend on PostgreSQL"},
        durable_history=False,
        history="none: a succeeded task's row is deleted (no result kept)",
        left=left, bulk=True,
        versions={"django-vtasks": version("django-vtasks"), "django": version("django")}))
