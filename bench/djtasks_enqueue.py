"""The latency of one django.tasks ``.enqueue()`` on this project's backend
(BENCHMARKS.md, "django.tasks"), on each broker/database pair: the Redis broker on
PostgreSQL, the database broker (the embedded default) on PostgreSQL and on SQLite;
outside a transaction and inside one (``transaction.atomic()`` around each call, its
commit included), wall and CPU milliseconds per call, and the statements each sends.

    .venv/bin/python bench/djtasks_enqueue.py [--n 300] [--pairs redis-pg,db-pg,db-sqlite]
        [--profile]

With ``--profile`` each pair instead splits the CPU of ``n`` enqueues outside a
transaction between the parts of the path (PARTS): each part's function is wrapped to
add up the process's CPU time spent inside it, so a part's figure includes the parts it
calls, and the wrappers' own cost (a microsecond or two each) is in the total.

Each pair runs in a fresh interpreter of its own (the settings are read at start).
Resources: PostgreSQL database ``bench_djtasks_enqueue`` (created when missing), Redis db
7 under the key prefix ``benchenq``, /tmp/bench-djtasks-enqueue.sqlite3. Prints one JSON
line per pair.
"""

import argparse
import collections
import contextlib
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

import common  # noqa: E402
import enqueue_timing  # noqa: E402
import timed_parts  # noqa: E402

DBNAME = "bench_djtasks_enqueue"
SQLITE = "/tmp/bench-djtasks-enqueue.sqlite3"
PAIRS = ["redis-pg", "db-pg", "db-sqlite"]
# The parts --profile splits an enqueue into: (label, module, attribute path). A part the
# code under test lacks (an older commit's) is left out.
PARTS = [
    ("Task.enqueue (all)", "django.tasks.base", "Task.enqueue"),
    ("backend: validate_task", "scheduler_tasks.backend", "SchedulerBackend.validate_task"),
    ("backend: TaskResult()", "django.tasks.base", "TaskResult.__init__"),
    ("backend: check_round_trip", "scheduler_tasks.backend", "check_round_trip"),
    ("backend: payload_of", "scheduler_tasks.results", "payload_of"),
    ("services.create_job", "jobs.services", "create_job"),
    ("create_job: option names", "jobs.services", "_check_options"),
    ("create_job: validate_specs", "jobs.services", "validate_specs"),
    ("one_off.create_one", "jobs.ingest.one_off", "create_one"),
    ("create_one: Job() and Run()", "django.db.models.base", "Model.__init__"),
    ("create_one: insert_job_with_run", "jobs.ingest.one_off", "insert_job_with_run"),
    ("insert: cursor.execute", "django.db.backends.utils", "CursorWrapper.execute"),
    ("create_one: push_after_commit", "runs.brokers.base", "Broker.push_after_commit"),
    ("push: Pipe.execute (Redis)", "runs.brokers.redis.wire", "Pipe.execute"),
]


def profiled(n: int, enqueue) -> dict:
    """CPU µs per call of each of PARTS over ``n`` calls of ``enqueue(i)``."""
    spent = collections.Counter()
    timed_parts.wrap(PARTS, spent)
    for i in range(n):
        enqueue(i)
    return {label: round(spent[label] / n * 1e6, 1) for label, _, _ in PARTS
            if label in spent}


def measure(pair: str, n: int, profile: bool = False, statement: bool = False) -> dict:
    """In this process: set up ``pair``, then time ``n`` enqueues each way; with
    ``statement``, instead the one-off create's statement alone (statement_alone)."""
    os.environ.update(DJANGO_SETTINGS_MODULE="scheduler_project.settings", DEBUG="false",
                      SECRET_KEY=secrets.token_urlsafe(50), SCHEDULER_REDIS_PREFIX="benchenq",
                      DATABASE_URL=common.pg_url(DBNAME) if pair.endswith("pg")
                      else f"sqlite:///{SQLITE}")
    if pair.startswith("redis"):
        os.environ["REDIS_URL"] = f"redis://{common.REDIS_HOST}:{common.REDIS_PORT}/7"
    else:
        os.environ.pop("REDIS_URL", None)
    import django

    django.setup()
    from bench_tasks import noop
    from django.core.management import call_command
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    call_command("migrate", verbosity=0)
    for i in range(enqueue_timing.WARM):  # imports, the broker's scripts, the connection
        noop.enqueue(i)
    out = {"pair": pair, "n": n, "load_1m": round(os.getloadavg()[0], 2)}
    if statement:
        return {**out, "statement_alone": statement_alone(lambda: noop.enqueue(0), n)}
    if profile:
        return {**out, "cpu_us": profiled(n, lambda i: noop.enqueue(i))}
    for label, inside in (("outside", False), ("inside", True)):
        with CaptureQueriesContext(connection) as queries:
            with transaction.atomic() if inside else contextlib.nullcontext():
                noop.enqueue(-1)
        out[f"{label}_statements"] = [q["sql"].split()[0] for q in queries]
    return {**out, **enqueue_timing.time_enqueues(noop.enqueue, n)}


def statement_alone(enqueue, n: int) -> dict:
    """Wall and CPU ms per call of the statement one ``enqueue()`` sends (the job and its
    run: jobs/ingest/one_off.py), replayed ``n`` times with the same parameters on a bare
    psycopg connection, prepared, outside a transaction: what an enqueue pays with no
    Python of ours around it."""
    import psycopg
    from django.db import connection
    from psycopg.types.json import Jsonb

    from scheduler_core import prepared

    sent = {}
    real = prepared.cursor

    class Kept:
        """The cursor, keeping what it executes."""

        def __init__(self, cursor):
            self.cursor = cursor

        def __enter__(self):
            self.cursor.__enter__()
            return self

        def __exit__(self, *exc):
            return self.cursor.__exit__(*exc)

        def execute(self, sql, params):
            sent.update(sql=sql, params=list(params))
            return self.cursor.execute(sql, params)

        def fetchone(self):
            return self.cursor.fetchone()

    prepared.cursor = lambda conn: Kept(real(conn))
    try:
        enqueue()
    finally:
        prepared.cursor = real
    params = [Jsonb(p.obj) if isinstance(p, Jsonb) else p for p in sent["params"]]
    url = common.pg_url(connection.settings_dict["NAME"])
    with psycopg.connect(url, autocommit=True, prepare_threshold=0) as pg:
        return enqueue_timing.per_call(lambda: pg.execute(sent["sql"], params), n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--pairs", default=",".join(PAIRS))
    parser.add_argument("--profile", action="store_true",
                        help="split the CPU of an enqueue between its parts (PARTS)")
    parser.add_argument("--statement", action="store_true",
                        help="time only the statement an enqueue sends (statement_alone)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.n, args.profile, args.statement)))
        return
    exists = f"SELECT 1 FROM pg_database WHERE datname = '{DBNAME}'"
    if not common.pg_exec_sql("postgres", exists):
        common.pg_exec_sql("postgres", f'CREATE DATABASE "{DBNAME}"')
    for pair in args.pairs.split(","):
        done = subprocess.run([sys.executable, __file__, "--one", pair, "--n", str(args.n),
                               *(["--profile"] if args.profile else []),
                               *(["--statement"] if args.statement else [])],
                              capture_output=True, text=True, check=True)
        print(done.stdout.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
