"""The /metrics families operators alert on (docs/alerts.md, "Metrics"): the dead letter,
runs by outcome, start lag as a histogram, busy worker slots, and who holds the scheduler
partitions and dispatcher shards. Registered beside runs/metrics/endpoint.py's collector on the
same private registry; every figure is read at scrape time from the database.
"""

from collections import defaultdict
from datetime import datetime, timedelta

from django.db import connections
from django.db.models import Count, Q, Sum
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
)
from prometheus_client.registry import Collector

from jobs.models import SchedulerPartition
from runs.clock import db_now
from runs.daemons import isolation
from runs.execution.outcomes import counts
from runs.metrics import stats
from runs.models import TERMINAL_STATES, Run, RunState, ShardLease
from scheduler_core import conf

# Upper bounds (seconds) of the start-lag buckets: invariant 4 says about a second, so
# the fine buckets sit below it (docs/architecture.md, "Invariants").
LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


def lag_buckets(using: str, since: datetime, in_database: bool | None = None,
                ) -> dict[str, tuple[list[int], float, int]]:
    """Per queue, the runs started since ``since``, catch-up runs left out: ``(cumulative
    count per LAG_BUCKETS bound, sum of lags in seconds, count)``. ``in_database``: one
    grouped query (default on PostgreSQL) or in Python (SQLite, modest load)."""
    # Catch-up runs are late on purpose: not lag (docs/cron.md, "Catch-up runs").
    started = Run.objects.using(using).filter(
        Q(state=RunState.RUNNING) | Q(state__in=TERMINAL_STATES, finished_at__gte=since),
        started_at__gte=since, catch_up=False)
    if in_database is None:
        in_database = connections[using].vendor == "postgresql"
    if not in_database:
        lags = defaultdict(list)
        for queue, started_at, run_at, created_at in started.values_list(
                "queue", "started_at", "run_at", "created_at"):
            lags[queue].append((started_at - max(run_at, created_at)).total_seconds())
        return {queue: ([sum(1 for v in values if v <= b) for b in LAG_BUCKETS], sum(values),
                        len(values)) for queue, values in lags.items()}
    columns = started.values("queue", "started_at", "run_at", "created_at")
    sql, params = columns.query.sql_with_params()
    cases = ", ".join(f"count(*) FILTER (WHERE lag <= {bound})" for bound in LAG_BUCKETS)
    query = (f"SELECT queue, {cases}, coalesce(sum(lag), 0), count(*) FROM "
             f"(SELECT queue, EXTRACT(EPOCH FROM started_at - GREATEST(run_at, created_at))"
             f"::float8 AS lag "
             f"FROM ({sql}) AS s) AS w GROUP BY queue")
    with connections[using].cursor() as cursor:
        cursor.execute(query, params)
        return {row[0]: (list(row[1:-2]), row[-2], row[-1]) for row in cursor.fetchall()}


def held(model, total: int, now: datetime, using: str) -> tuple[dict[str, int], int]:
    """Live leases of ``model`` (SchedulerPartition or ShardLease) per holder, and how
    many of the ``total`` nobody holds now."""
    rows = (model.objects.using(using).filter(lease_expires_at__gt=now).exclude(owner="")
            .values_list("owner").annotate(n=Count("pk")))
    holders = dict(rows)
    return holders, max(total - sum(holders.values()), 0)


class HealthCollector(Collector):
    """The families above, from database alias ``using``."""

    def __init__(self, using: str = "default"):
        self.using = using

    def describe(self):
        return []  # registering must not query the database

    def collect(self):
        using = self.using
        now = db_now(using)
        dead = Run.objects.using(using).filter(state=RunState.DEAD)
        by_queue = GaugeMetricFamily("scheduler_dead_letter_runs",
                                     "Runs in the dead letter, per queue.", labels=["queue"])
        for queue, n in dead.values_list("queue").annotate(n=Count("pk")).order_by("queue"):
            by_queue.add_metric([queue], n)
        yield by_queue
        by_owner = GaugeMetricFamily(
            "scheduler_dead_letter_runs_by_owner",
            "Runs in the dead letter, per owner (username) of their job; runs of jobs "
            "without an owner are not counted here.", labels=["owner"])
        for owner, n in (dead.filter(job__owner__isnull=False)
                         .values_list("job__owner__username").annotate(n=Count("pk"))
                         .order_by("job__owner__username")):
            by_owner.add_metric([owner], n)
        yield by_owner

        outcomes = CounterMetricFamily(
            "scheduler_runs",
            "Attempts acked, by queue and the run's state after them: succeeded, retrying, "
            "dead, cancelled; and runs expired at lease time, expired (counted by the "
            "workers and dispatchers, added every few seconds).", labels=["queue", "outcome"])
        for queue, outcome, n in counts(using):
            outcomes.add_metric([queue, outcome], n)
        yield outcomes

        survived = CounterMetricFamily(
            "scheduler_daemon_item_errors",
            "Failures a daemon survived, by daemon and duty: of one item (an alert, a "
            "cron job or workflow) or of a whole duty of its round (reap, reconcile, ...), "
            "each logged with its traceback and backed off (docs/security.md, \"Daemons' "
            "fault isolation\").", labels=["daemon", "duty"])
        for daemon, duty, n in isolation.counts(using):
            survived.add_metric([daemon, duty], n)
        yield survived

        window = stats.WINDOW_S
        lag = GaugeHistogramMetricFamily(
            "scheduler_start_lag_seconds",
            f"Seconds from run_at to start of the runs started in the last {window} s, per "
            f"queue, catch-up runs left out (a gauge histogram over that window).",
            labels=["queue"])
        for queue, (cumulative, total, count) in sorted(
                lag_buckets(using, now - timedelta(seconds=window)).items()):
            buckets = [(str(b), c) for b, c in zip(LAG_BUCKETS, cumulative, strict=True)]
            lag.add_metric([queue], [*buckets, ("+Inf", count)], gsum_value=total)
        yield lag

        busy = GaugeMetricFamily(
            "scheduler_queue_busy_slots",
            "Runs leased by workers (running, including those leased ahead of their "
            "start), per queue; compare with scheduler_queue_worker_slots.",
            labels=["queue"])
        running = (Run.objects.using(using).filter(state=RunState.RUNNING)
                   .values_list("queue").annotate(n=Count("pk")).order_by("queue"))
        for queue, n in running:
            busy.add_metric([queue], n)
        yield busy
        live = stats.live_workers(using).aggregate(n=Count("pk"), slots=Sum("concurrency"))
        workers = GaugeMetricFamily("scheduler_live_workers",
                                    "Live worker processes (heartbeat within the lease TTL).")
        workers.add_metric([], live["n"])
        yield workers
        total = GaugeMetricFamily("scheduler_worker_slots",
                                  "Slots (summed concurrency) of every live worker.")
        total.add_metric([], live["slots"] or 0)
        yield total

        for name, model, count, what in (
                ("partitions", SchedulerPartition, conf.get("PARTITIONS"),
                 "scheduler partitions (job ids) whose cron runs a scheduler creates"),
                ("shards", ShardLease, conf.get("SHARDS"),
                 "dispatcher shards a dispatcher promotes, reaps and reconciles")):
            holders, unheld = held(model, count, now, using)
            family = GaugeMetricFamily(f"scheduler_{name}_held",
                                       f"Live leases on {what}, per holder.",
                                       labels=["holder"])
            for holder, n in sorted(holders.items()):
                family.add_metric([holder], n)
            yield family
            nobody = GaugeMetricFamily(f"scheduler_{name}_unheld",
                                       f"How many of the {what} no live lease covers.")
            nobody.add_metric([], unheld)
            yield nobody
