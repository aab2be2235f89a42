"""django-vtasks adapter of the benchmark's W2 through django.tasks (the adapter contract
is in bench/run.py's docstring; BENCHMARKS.md, "django.tasks").

Run with the peer's own virtualenv:
    bench/.venvs/vtasks/bin/python bench/peers/vtasks/bench.py W2 [--n N] [--quick]

Setup per django-vtasks' README quick start: a tiny Django project (benchvt/settings.py)
with its database backend on PostgreSQL (database bench_vtasks, dropped, created and
migrated per run); two ``manage.py runworker`` processes at their defaults (asyncio, 20
concurrent tasks per worker). django-vtasks deletes a task's row when it succeeds (no
result is kept), so done is an empty queue table (bench/djtasks_peer.py).
"""

import os
import sys
from importlib.metadata import version
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))  # bench/: common, djtasks_peer, bench_tasks
sys.path.insert(0, str(HERE))
os.environ["DJANGO_SETTINGS_MODULE"] = "benchvt.settings"

import djtasks_peer  # noqa: E402


def left() -> int:
    from django_vtasks.db.models import QueuedTask

    return QueuedTask.objects.count()


if __name__ == "__main__":
    djtasks_peer.run(
        "vtasks", HERE, "bench_vtasks",
        [[sys.executable, "manage.py", "runworker"]] * 2, left,
        {"commands": {"workers": "2 x python manage.py runworker"},
         "versions": {"django-vtasks": version("django-vtasks"),
                      "django": version("django")},
         "setup": "django-vtasks database backend on PostgreSQL, 2 runworker processes "
                  "at their defaults (asyncio, 20 concurrent tasks each); a succeeded "
                  "task's row is deleted, no result kept; the clock includes the "
                  "workers' start"})
