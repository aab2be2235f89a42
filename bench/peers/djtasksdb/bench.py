"""django-tasks-db adapter of the benchmark's W2 through django.tasks (the adapter contract
is in bench/run.py's docstring; BENCHMARKS.md, "django.tasks").

Run with the peer's own virtualenv:
    bench/.venvs/djtasksdb/bin/python bench/peers/djtasksdb/bench.py W2 [--n N] [--quick]

Setup per django-tasks-db's docs: a tiny Django project (benchdjt/settings.py) with its
DatabaseBackend as TASKS' default and the results table in PostgreSQL database
bench_djtasksdb (dropped, created and migrated per run); two ``manage.py db_worker``
processes at their defaults (1 s poll interval, a random start-up delay under 1 s)
drain the tasks; done when every result is SUCCESSFUL (bench/djtasks_peer.py).
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


def left() -> int:
    from django_tasks_db.models import DBTaskResult

    return DBTaskResult.objects.exclude(status="SUCCESSFUL").count()


if __name__ == "__main__":
    djtasks_peer.run(
        "djtasksdb", HERE, "bench_djtasksdb",
        [[sys.executable, "manage.py", "db_worker"]] * 2, left,
        {"commands": {"workers": "2 x python manage.py db_worker"},
         "versions": {"django-tasks-db": version("django-tasks-db"),
                      "django": version("django")},
         "setup": "django-tasks-db DatabaseBackend on PostgreSQL, 2 db_worker processes "
                  "at their defaults, each running one task at a time; results kept; "
                  "the clock includes the workers' start"})
