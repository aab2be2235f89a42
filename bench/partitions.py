"""The history in time partitions against plain tables (docs/retention.md, "Partitioned
history"): the prune and the hot queries at N runs.

    .venv/bin/python bench/partitions.py --layout partitioned|plain [--runs N]
        [--jobs J] [--dead F] [--lines L] [--days D] [--repeat R] [--explains E] [--skip-hot]
        [--skip-prune] [--skip-load] [--prune-budget-s S]

Each layout in its own database (bench_partitions_<layout>, created and migrated; plain:
migrated with SCHEDULER_HISTORY_PARTITION_S=0, the same code on plain tables). Setup, not
timed: J cron jobs, N runs spread evenly over the D (8) whole days before today (UTC), every
run with one attempt and L log lines per attempt, by INSERT ... SELECT generate_series;
a fraction F of the runs dead, the rest succeeded; plus 50,000 pending runs (the brief's
pending set: 5,000 queued, the rest scheduled) and ANALYZE. The J jobs belong to the user
bench-big; a second tenant, bench-small, owns 10 jobs of 20 runs each (over the same days,
one dead per job): the tenant whose list must stay fast beside the big one's 10 M.

Timed, each R times (median; every write inside a transaction rolled back): the lease of
100 queued runs (runs/execution/leases.py, start_attempts: the Redis broker's database half), the
success ack of those 100 (completion.complete), the database broker's lease (its SELECT
FOR UPDATE SKIP LOCKED + start), the API's run list (first page; the next page by
its cursor; state=dead; job=<id>; queue and state; one run by id; its logs; the runs of
one job; the dead letter), the same lists as each tenant sees them, the admin's run,
attempt and log-line lists and dead letter; for each, the wall time of the call and the
server's time (EXPLAIN ANALYZE planning + execution, summed over its statements). Then the
prune of everything before today: partitioned, the dispatcher's way
(retention.drop_partitions without finish, counts estimated: the retention call, the runs
gone from the tables; then retention.finish_detached, the drop its finisher thread does,
timed apart), then the row prune of what is left; plain,
retention.prune in batches of 5,000 (prunehistory).
Prints one JSON line.
"""

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))


def parse():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layout", choices=["partitioned", "plain"], required=True)
    parser.add_argument("--runs", type=int, default=10_000_000)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--dead", type=float, default=0.001)
    parser.add_argument("--lines", type=int, default=1)
    parser.add_argument("--days", type=int, default=8, choices=range(1, 9),
                        help="the history spread over the D whole days before today")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--explains", type=int, default=3,
                        help="EXPLAIN ANALYZE runs per query (server time: their median)")
    parser.add_argument("--skip-prune", action="store_true")
    parser.add_argument("--skip-hot", action="store_true", help="no hot-query figures")
    parser.add_argument("--prune-budget-s", type=float, default=float("inf"),
                        help="stop the row prune after this many seconds (the rate is "
                             "then the figure)")
    parser.add_argument("--skip-load", action="store_true",
                        help="measure on the data a previous run loaded")
    return parser.parse_args()


ARGS = parse()
os.environ["BENCH_OURS_DB"] = f"bench_partitions_{ARGS.layout}"
os.environ.setdefault("ALLOWED_HOSTS", "testserver,localhost")
if ARGS.layout == "plain":
    os.environ["SCHEDULER_HISTORY_PARTITION_S"] = "0"

import ours  # noqa: E402  (sets the bench environment)


def sql(statement: str, params=None):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchall() if cursor.description else cursor.rowcount


def load(n: int, jobs: int, dead: float, lines: int) -> dict:
    """The history and the pending set (see the module's docstring); returns timings."""
    from django.core.management import call_command
    from django.db import connection, transaction

    from runs.clock import db_now
    from runs.history import time_partitions as hp

    call_command("migrate", verbosity=0)
    sql(f"TRUNCATE {', '.join(ours.TABLES)} RESTART IDENTITY CASCADE")
    if hp.partitioned():
        # A database migrated empty has partitions from today on; one a week old would
        # have the past days' too (as the migration of a populated database makes them).
        with transaction.atomic(), connection.cursor() as cursor:
            lower = hp.floor_to_width(db_now(), 86_400) - 8 * hp.timedelta(days=1)
            first = hp.ranges(cursor)[0].lower
            while lower < first:
                hp.create_range(cursor, hp.Range(lower, lower + hp.timedelta(days=1)))
                lower += hp.timedelta(days=1)
    from django.contrib.auth import get_user_model

    users = get_user_model().objects
    users.filter(username__in=["bench-big", "bench-small"]).delete()
    big = users.create_user("bench-big", "big@example.com", "x")
    small = users.create_user("bench-small", "small@example.com", "x")
    began = time.perf_counter()
    sql("INSERT INTO jobs_schedule (cron, timezone, misfire_policy, max_lag_s, jitter_s) "
        "SELECT '* * * * *', 'UTC', 'run_once', 3600, 0 FROM generate_series(1, %s)", [jobs])
    sql("INSERT INTO jobs_job (name, handler, payload, queue, shard_key, priority, status, "
        "schedule_id, next_run_at, timeout_s, max_attempts, unique_key, unique_states, "
        "created_at, updated_at, owner_id) SELECT 'j' || id, 'noop', '{}', 'default', '', 5, "
        "'active', id, now(), 60, 4, '', '', now(), now(), %s FROM jobs_schedule", [big.pk])
    # Run i of job (i % jobs): the 8 days before today's midnight, evenly; microseconds
    # apart so (job, scheduled_at) stays unique.
    sql("""
        INSERT INTO runs_run (job_id, scheduled_at, run_at, jitter_s, state, queue, shard,
            priority, attempt, max_attempts, worker_id, created_at, finished_at, started_at,
            error, catch_up)
        SELECT 1 + i %% %(jobs)s, t, t, 0,
               CASE WHEN i %% %(every)s = 0 THEN 'dead' ELSE 'succeeded' END,
               'default', 0, 5, 1, 4, 'w', t, t + interval '1 second', t, '', false
        FROM (SELECT i, date_trunc('day', now()) - %(days)s * interval '1 day'
                        + (i * (%(days)s * 86400.0 / %(n)s)) * interval '1 second' AS t
              FROM generate_series(0, %(n)s - 1) i) g""",
        {"jobs": jobs, "n": n, "every": max(int(1 / dead), 1) if dead > 0 else n + 1,
         "days": ARGS.days})
    runs_s = time.perf_counter() - began
    # The small tenant: 10 one-off jobs (no schedule), 20 runs each over the days.
    sql("INSERT INTO jobs_job (name, handler, payload, queue, shard_key, priority, status, "
        "run_at, timeout_s, max_attempts, unique_key, unique_states, created_at, "
        "updated_at, owner_id) SELECT 's' || g, 'noop', '{}', 'default', '', 5, 'active', "
        "now(), 60, 4, '', '', now(), now(), %s FROM generate_series(1, 10) g", [small.pk])
    sql("""
        INSERT INTO runs_run (job_id, scheduled_at, run_at, jitter_s, state, queue, shard,
            priority, attempt, max_attempts, worker_id, created_at, finished_at, started_at,
            error, catch_up)
        SELECT j.id, t, t, 0, CASE WHEN k = 0 THEN 'dead' ELSE 'succeeded' END, 'default',
               0, 5, 1, 4, 'w', t, t + interval '1 second', t, '', false
        FROM jobs_job j, generate_series(0, 19) k,
             LATERAL (SELECT date_trunc('day', now()) - %(days)s * interval '1 day'
                      + (k * %(days)s * 4320 + j.id %% 60) * interval '1 second' AS t) g
        WHERE j.owner_id = %(small)s""", {"days": ARGS.days, "small": small.pk})
    attempt_cols = "run_id, number, worker_id, started_at, finished_at, outcome, error"
    sql(f"INSERT INTO runs_attempt ({attempt_cols}, run_scheduled_at) SELECT id, 1, 'w', "
        "started_at, finished_at, CASE state WHEN 'dead' THEN 'failed' ELSE 'succeeded' END, "
        "'', scheduled_at FROM runs_run")
    sql("INSERT INTO runs_logline (attempt_id, created_at, level, logger, message, "
        "run_scheduled_at) SELECT a.id, a.started_at, 20, 'bench', 'line ' || g, "
        "a.run_scheduled_at FROM runs_attempt a, generate_series(1, %s) g", [lines])
    # The pending set: runs of the next hour, 5,000 of them already queued.
    sql("""
        INSERT INTO runs_run (job_id, scheduled_at, run_at, jitter_s, state, queue, shard,
            priority, attempt, max_attempts, worker_id, created_at, error, catch_up)
        SELECT 1 + i %% %(jobs)s, t, t, 0, CASE WHEN i < 5000 THEN 'queued' ELSE 'scheduled'
               END, 'default', 0, 5, 0, 4, '', now(), '', false
        FROM (SELECT i, now() + (i - 5000) * interval '70 ms' AS t
              FROM generate_series(0, 49999) i) g""", {"jobs": jobs})
    sql("ANALYZE")
    return {"load_s": round(time.perf_counter() - began, 1), "runs_s": round(runs_s, 1)}


def explain_ms(statements: list[str]) -> float:
    """Server milliseconds (planning + execution) of ``statements``, each EXPLAIN
    ANALYZEd inside a transaction rolled back."""
    from django.db import connection, transaction

    total = 0.0
    for statement in statements:
        if not statement.lstrip().upper().startswith(("SELECT", "UPDATE", "INSERT", "DELETE",
                                                       "WITH")):
            continue
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement)
                plan = cursor.fetchone()[0]
            plan = plan[0] if isinstance(plan, list) else json.loads(plan)[0]
            total += plan.get("Planning Time", 0) + plan.get("Execution Time", 0)
            transaction.set_rollback(True)
    return total


def measure(name: str, fn, results: dict) -> None:
    """Median wall ms of ``fn()`` over ARGS.repeat tries (each in a transaction rolled
    back), and the server ms of its statements (explain_ms of the last try's, median of
    ARGS.explains)."""
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    walls = []
    for _ in range(ARGS.repeat):
        with CaptureQueriesContext(connection) as queries, transaction.atomic():
            began = time.perf_counter()
            fn()
            walls.append((time.perf_counter() - began) * 1000)
            transaction.set_rollback(True)
    statements = [q["sql"] for q in queries.captured_queries]
    servers = [explain_ms(statements) for _ in range(ARGS.explains)]
    results[name] = {"wall_ms": round(statistics.median(walls), 2),
                     "server_ms": round(statistics.median(servers), 2),
                     "statements": len(statements)}
    ours.common.log(name, results[name])


def hot_queries() -> dict:
    from django.contrib.auth import get_user_model
    from django.test import Client

    from runs.brokers.database import DatabaseBroker
    from runs.execution import completion
    from runs.execution.leases import start_attempts
    from runs.models import Run, RunState
    from runs.types import Outcome

    results: dict = {}
    queued = list(Run.objects.filter(state=RunState.QUEUED).order_by("id")
                  .values_list("pk", flat=True)[:100])
    measure("lease_100", lambda: start_attempts(queued, "bench", 60, "default"),
            results)

    def lease_and_ack():
        leases = start_attempts(queued, "bench", 60, "default")
        began = time.perf_counter()
        completion.complete([Outcome(lease=le, outcome="succeeded") for le in leases],
                            "default")
        results.setdefault("_ack", []).append((time.perf_counter() - began) * 1000)

    measure("lease_and_ack_100", lease_and_ack, results)
    ack = results.pop("_ack")
    results["ack_100"] = {"wall_ms": round(statistics.median(ack), 2)}
    broker = DatabaseBroker("default")
    measure("database_broker_lease_10", lambda: broker.lease(["default"], 10, "bench", 60),
            results)

    user = get_user_model().objects.filter(username="bench-admin").first() or \
        get_user_model().objects.create_superuser("bench-admin", "b@example.com", "x")
    client = Client()
    client.force_login(user)
    dead = (Run.objects.filter(state=RunState.DEAD, job__owner__username="bench-big")
            .order_by("-id").first())
    second = client.get("/api/runs/").json()["next"]
    pages = {
        "api_runs": "/api/runs/",
        "api_runs_page_2": second,
        "api_runs_dead": "/api/runs/?state=dead",
        "api_runs_job": f"/api/runs/?job={dead.job_id}",
        "api_runs_queue_state": "/api/runs/?queue=default&state=succeeded",
        "api_run_by_id": f"/api/runs/{dead.pk}/",
        "api_run_logs": f"/api/runs/{dead.pk}/logs/",
        "api_dead_letter": "/api/dead-letter/",
        "api_job_runs": f"/api/jobs/{dead.job_id}/runs/",
        "admin_runs": "/admin/runs/run/",
        "admin_attempts": "/admin/runs/attempt/",
        "admin_log_lines": "/admin/runs/logline/",
        "admin_runs_dead": "/admin/runs/run/?state__exact=dead",
        "admin_dead_letter": "/admin/runs/deadrun/",
        "admin_run_page": f"/admin/runs/run/{dead.pk}/change/",
    }
    tenants = {}
    for username in ("bench-big", "bench-small"):
        tenant = Client()
        tenant.force_login(get_user_model().objects.get(username=username))
        tenants[username.removeprefix("bench-")] = tenant
    small_job = Run.objects.filter(job__owner__username="bench-small").first().job_id
    for tenant, job in (("big", dead.job_id), ("small", small_job)):
        pages.update({f"{tenant}_api_runs": (tenants[tenant], "/api/runs/"),
                      f"{tenant}_api_runs_dead": (tenants[tenant], "/api/runs/?state=dead"),
                      f"{tenant}_api_job_runs": (tenants[tenant], f"/api/jobs/{job}/runs/"),
                      f"{tenant}_api_dead_letter": (tenants[tenant], "/api/dead-letter/")})
    for name, page in pages.items():
        who, url = page if isinstance(page, tuple) else (client, page)

        def get(who=who, url=url):
            response = who.get(url)
            assert response.status_code == 200, (url, response.status_code)
        measure(name, get, results)
    return results


class StallProbe(threading.Thread):
    """What an ack sees of the retention call: a statement on runs_run (its parent table,
    as every lease and ack) every few milliseconds on a connection of its own; the
    longest one took as long as the call held the tables' exclusive locks, give or take
    a few ms. ``finish()`` stops it and returns that longest statement (seconds)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.longest = 0.0

    def run(self):
        from django.db import connection

        with connection.cursor() as cursor:
            while not self.stop.is_set():
                began = time.perf_counter()
                cursor.execute("SELECT count(*) FROM runs_run WHERE id = 0")
                cursor.fetchall()
                self.longest = max(self.longest, time.perf_counter() - began)
                time.sleep(0.002)
        connection.close()

    def finish(self) -> float:
        self.stop.set()
        self.join()
        return round(self.longest, 3)


def prune() -> dict:
    """The prune of everything before today's midnight, as the dispatcher does it
    (partitioned: the drop, with the planner's counts; then the row prune of what is
    left, in batches of 5,000 as prunehistory). Counts are taken before and after,
    untimed."""
    from runs.clock import db_now
    from runs.history import retention
    from runs.history import time_partitions as history_partitions

    before = history_partitions.floor_to_width(db_now(), 86_400)
    counts = {"runs_before": sql("SELECT count(*) FROM runs_run")[0][0],
              "prunable": retention.prunable(before).count()}
    cpu = time.process_time()
    probe = StallProbe()
    probe.start()
    began = time.perf_counter()
    # The dispatcher's retention call: detach (the runs leave the tables), then its
    # finisher thread's drop of the detached tables, timed on its own.
    retention.drop_partitions(before, count=False, finish=False)
    detached_s = time.perf_counter() - began
    counts["longest_stall_s"] = probe.finish()
    finish_began = time.perf_counter()
    retention.finish_detached(count=False)
    finish_s = time.perf_counter() - finish_began
    dropped_s = time.perf_counter() - began
    rows = 0
    while time.perf_counter() - began < ARGS.prune_budget_s:
        pruned = retention.prune(before, 5000)
        rows += pruned.runs
        if pruned.runs < 5000:
            break
    wall = time.perf_counter() - began
    counts["row_prune_runs_per_s"] = round(rows / max(wall - dropped_s, 1e-9))
    counts.update({"runs_after": sql("SELECT count(*) FROM runs_run")[0][0],
                   "attempts_after": sql("SELECT count(*) FROM runs_attempt")[0][0],
                   "log_lines_after": sql("SELECT count(*) FROM runs_logline")[0][0],
                   "row_pruned_runs": rows, "wall_s": round(wall, 3),
                   "retention_call_s": round(detached_s, 3),
                   "deferred_drop_s": round(finish_s, 3),
                   "partition_drop_s": round(dropped_s, 3),
                   "client_cpu_s": round(time.process_time() - cpu, 3)})
    counts["pruned_runs"] = counts["runs_before"] - counts["runs_after"]
    return counts


def main() -> None:
    ours._ensure_database()
    ours._setup_django()
    details = {"layout": ARGS.layout, "runs": ARGS.runs, "jobs": ARGS.jobs, "days": ARGS.days,
               "dead": ARGS.dead, "lines": ARGS.lines, "load": os.getloadavg()}
    if not ARGS.skip_load:
        details["setup"] = load(ARGS.runs, ARGS.jobs, ARGS.dead, ARGS.lines)
    if not ARGS.skip_hot:
        details["hot"] = hot_queries()
    if not ARGS.skip_prune:
        details["prune"] = prune()
    details["load_after"] = os.getloadavg()
    details["versions"] = ours.versions()
    print(json.dumps({"workload": "partitions", "details": details}), flush=True)


if __name__ == "__main__":
    main()
