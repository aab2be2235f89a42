"""django-vtasks adapter of the benchmark, Valkey backend (on the bench's Redis, db 7): W1
and W2 through django.tasks. The Django project, virtualenv and task are bench/peers/vtasks'
(bench/run.py builds that virtualenv for both); see its docstring for the rows' options.

Run with the vtasks virtualenv:
    bench/.venvs/vtasks/bin/python bench/peers/vtasksvk/bench.py W2 [--n N] [--variant V]

The backend keeps a task as a message in the list ``{vt}:q:default`` and, while a worker
runs it, in that worker's ``{vt}:processing:<id>`` list (the names its ``_get_key`` gives);
it is removed at the ack (no result kept). Done: both empty.
"""

import os
import sys
from importlib.metadata import version
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent / "vtasks"
sys.path.insert(0, str(HERE.parent.parent))  # bench/: common, djtasks_peer, bench_tasks
sys.path.insert(0, str(HERE))
os.environ["DJANGO_SETTINGS_MODULE"] = "benchvt.settings"
os.environ["BENCH_VTASKS_BACKEND"] = "valkey"

import common  # noqa: E402
import djtasks_peer  # noqa: E402

REDIS_DB = 7
WORKER = [sys.executable, "manage.py", "runworker"]


def left() -> int:
    from django.tasks import task_backends

    # The backend's own key names (its prefix setting adds a separator of its own).
    key = task_backends["default"]._get_key
    client = common.Redis(REDIS_DB)
    try:
        total = client.execute("LLEN", key("q:default"))
        cursor = b"0"
        while True:
            cursor, keys = client.execute("SCAN", cursor, "MATCH", key("processing:*"),
                                          "COUNT", 1000)
            total += sum(client.execute("LLEN", key) for key in keys)
            if cursor == b"0":
                return total
    finally:
        client.close()


if __name__ == "__main__":
    djtasks_peer.run(djtasks_peer.Peer(
        name="vtasksvk", here=HERE, dbname="bench_vtasks",
        workers={"default": ([WORKER] * 2, {}),
                 "tuned": ([WORKER] * 2, {"VTASKS_CONCURRENCY": "100"})},
        config={"default": "2 x manage.py runworker (asyncio, VTASKS_CONCURRENCY 20), "
                           "Valkey backend on Redis",
                "tuned": "2 x manage.py runworker with VTASKS_CONCURRENCY=100, Valkey "
                         "backend on Redis"},
        durable_history=False,
        history="none: a task is a Redis list entry, removed at the ack (no result kept)",
        left=left, reset=lambda: common.redis_flushdb(REDIS_DB), bulk=True,
        versions={"django-vtasks": version("django-vtasks"),
                  "django-vcache": version("django-vcache"), "django": version("django")}))
