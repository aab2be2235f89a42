"""Read-only figures about queues, their shards and workers, for /api/queues/, /metrics
(runs/metrics/endpoint.py) and the dashboard: one place so every view reports the same numbers.

Per (queue, shard): ``ready``/``delayed``/``leased`` depth in the broker, the age of the
oldest run that is due and not started, throughput (runs that reached a final state per
second over the last ``WINDOW_S`` seconds, by final state) and lag (seconds from ``run_at``,
or ``created_at`` if later, to ``started_at`` of the runs started in the last
``WINDOW_S`` seconds, catch-up runs left out and counted apart: docs/cron.md,
"Catch-up runs"). Per queue: the same, plus live workers and their slots. Every time is
on the database clock.

Depth comes from ``Broker.shard_depth()``, the broker's own per-shard reading; everything
else from the runs table, through indexes that bound each query to the pending rows or
the last minute.
"""

import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta

from django.db import connections
from django.db.models import Count, Min, Q
from django.db.models.functions import Greatest

from jobs.models import Job
from runs.brokers import get_broker
from runs.brokers.base import Broker
from runs.clock import db_now
from runs.models import (
    PENDING_STATES,
    TERMINAL_STATES,
    Run,
    RunState,
    WorkerProcess,
)
from scheduler_core import conf

WINDOW_S = 60
"""Seconds of history behind throughput and lag."""

OUTCOMES = tuple(str(state) for state in TERMINAL_STATES)
"""The final states throughput is counted by: succeeded, dead, cancelled."""

QueueShard = tuple[str, int]


@dataclass(frozen=True)
class Depth:
    """Runs of one queue shard in the broker: ready now, delayed (waiting for run_at),
    leased (running)."""

    ready: int = 0
    delayed: int = 0
    leased: int = 0


@dataclass(frozen=True)
class Lag:
    """Seconds from ``run_at`` to ``started_at`` of the ``count`` runs started in the last
    WINDOW_S seconds (running or finished now): median, 99th percentile, maximum."""

    count: int
    p50_s: float
    p99_s: float
    max_s: float


def _throughput() -> dict[str, float]:
    return dict.fromkeys(OUTCOMES, 0.0)


@dataclass(frozen=True)
class ShardStats:
    """One shard of a queue. ``throughput_per_s`` maps each final state to runs per second
    over the last WINDOW_S seconds; ``lag_s`` is None when no run started in that window;
    ``oldest_ready_age_s`` is None when no run is due."""

    shard: int
    ready: int
    delayed: int
    leased: int
    oldest_ready_age_s: float | None
    throughput_per_s: dict[str, float] = field(default_factory=_throughput)
    lag_s: Lag | None = None


@dataclass(frozen=True)
class QueueStats:
    """One queue: ``ready``/``delayed``/``leased`` depth in the broker summed over its
    shards, the age in seconds of the oldest run that is due and not started (None when
    none is), live workers serving it and their slots (summed ``--concurrency``),
    throughput and lag over the whole queue, and the same figures per shard."""

    queue: str
    ready: int
    delayed: int
    leased: int
    oldest_ready_age_s: float | None
    live_workers: int
    worker_slots: int = 0
    throughput_per_s: dict[str, float] = field(default_factory=_throughput)
    lag_s: Lag | None = None
    shards: list[ShardStats] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def live_workers(using: str = "default"):
    """Workers that heartbeated within three heartbeat intervals and did not stop."""
    since = db_now(using) - timedelta(seconds=3 * conf.heartbeat_interval())
    return WorkerProcess.objects.using(using).filter(
        last_heartbeat_at__gte=since, stopped_at__isnull=True
    )


# --- the figures, one reader each --------------------------------------------------------


def shard_depth(broker: Broker) -> dict[QueueShard, Depth]:
    """Ready, delayed and leased counts per (queue, shard) as ``broker`` holds them
    (``Broker.shard_depth``: ZCARDs on Redis, where ready includes runs parked for their
    owner's limit; a GROUP BY queue, shard on the database broker). Raises
    BrokerUnavailable when Redis cannot be reached."""
    return {(queue, shard): Depth(ready, delayed, leased)
            for queue, shard, ready, delayed, leased in broker.shard_depth()}


def oldest_due(using: str, now: datetime) -> dict[QueueShard, datetime]:
    """The earliest ``run_at`` (or ``created_at``, if later: a run backdated before it
    existed has waited since then) per (queue, shard) of pending runs that are due, of
    active jobs. Whatever the label: the Redis broker moves a run pushed when already due straight
    to ready while its row may still say "scheduled". Runs held by a paused job are left
    out: no worker can take them, so more workers would not shorten their wait."""
    active = Job.objects.using(using).filter(status=Job.Status.ACTIVE).values("pk")
    rows = (
        Run.objects.using(using)
        .filter(state__in=PENDING_STATES, run_at__lte=now, job_id__in=active)
        .values("queue", "shard")
        .annotate(oldest=Min(Greatest("run_at", "created_at"))).order_by()
    )
    return {(r["queue"], r["shard"]): r["oldest"] for r in rows}


def finished_counts(using: str, since: datetime) -> dict[QueueShard, dict[str, int]]:
    """Runs that reached each final state at or after ``since``, per (queue, shard).
    Reads the (state, finished_at) index only."""
    rows = (
        Run.objects.using(using)
        .filter(state__in=TERMINAL_STATES, finished_at__gte=since)
        .values("queue", "shard", "state").annotate(n=Count("pk")).order_by()
    )
    counts: dict[QueueShard, dict[str, int]] = defaultdict(lambda: dict.fromkeys(OUTCOMES, 0))
    for r in rows:
        counts[(r["queue"], r["shard"])][r["state"]] = r["n"]
    return dict(counts)


def _started_since(using: str, since: datetime):
    # Runs started in the window are running now or finished since it began (a run whose
    # attempt failed has a new run_at, so its lag is gone): both halves have an index,
    # run_leased and run_state_finished.
    return Run.objects.using(using).filter(
        Q(state=RunState.RUNNING) | Q(state__in=TERMINAL_STATES, finished_at__gte=since),
        started_at__gte=since,
    )


def catch_ups(using: str, since: datetime) -> dict[QueueShard, int]:
    """Catch-up runs started at or after ``since``, per (queue, shard): the runs ``lags``
    leaves out (docs/cron.md, "Catch-up runs")."""
    rows = (_started_since(using, since).filter(catch_up=True).values("queue", "shard")
            .annotate(n=Count("pk")).order_by())
    return {(r["queue"], r["shard"]): r["n"] for r in rows}


def lags(using: str, since: datetime, in_database: bool | None = None,
         ) -> tuple[dict[QueueShard, Lag], dict[str, Lag]]:
    """Lag of the runs started at or after ``since`` (seconds from ``run_at``, or from
    ``created_at`` if later: runs/models.py, LAG_FROM), catch-up runs left out (their
    lateness is on purpose: ``catch_ups`` counts them): per (queue, shard) and per queue
    (percentiles do not add up, so the queue's are computed over all its runs).
    ``in_database``: percentiles by PostgreSQL (default there) or in Python (SQLite)."""
    if in_database is None:
        in_database = connections[using].vendor == "postgresql"
    if in_database:
        return _lags_postgresql(using, since)
    rows = (_started_since(using, since).filter(catch_up=False)
            .values_list("queue", "shard", "started_at", "run_at", "created_at"))
    by_shard: dict[QueueShard, list[float]] = defaultdict(list)
    by_queue: dict[str, list[float]] = defaultdict(list)
    for queue, shard, started_at, run_at, created_at in rows:
        lag = (started_at - max(run_at, created_at)).total_seconds()
        by_shard[(queue, shard)].append(lag)
        by_queue[queue].append(lag)
    return ({k: _lag_of(v) for k, v in by_shard.items()},
            {k: _lag_of(v) for k, v in by_queue.items()})


def _lags_postgresql(using: str, since: datetime):
    window = (_started_since(using, since).filter(catch_up=False)
              .values("queue", "shard", "started_at", "run_at", "created_at"))
    sql, params = window.query.sql_with_params()
    # GROUPING SETS gives the shards' and the queues' percentiles in one pass over the window.
    query = f"""
        SELECT queue, shard, GROUPING(shard), count(*),
               percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY lag), max(lag)
        FROM (SELECT queue, shard,
                     EXTRACT(EPOCH FROM started_at - GREATEST(run_at, created_at))::float8 AS lag
              FROM ({sql}) AS started) AS w
        GROUP BY GROUPING SETS ((queue, shard), (queue))
    """
    by_shard, by_queue = {}, {}
    with connections[using].cursor() as cursor:
        cursor.execute(query, params)
        for queue, shard, whole_queue, count, (p50, p99), worst in cursor.fetchall():
            lag = Lag(count, round(p50, 3), round(p99, 3), round(worst, 3))
            if whole_queue:
                by_queue[queue] = lag
            else:
                by_shard[(queue, shard)] = lag
    return by_shard, by_queue


def percentile(values: list[float], fraction: float) -> float | None:
    """The ``fraction`` percentile of ``values`` (any order), ``fraction`` in hundredths
    from 0 to 1: linear interpolation between the closest ranks, as PostgreSQL's
    ``percentile_cont`` does, so figures computed in Python (SQLite) and by the database
    agree. None when ``values`` is empty; ValueError for another ``fraction``."""
    hundredths = round(fraction * 100)
    if not 0 <= hundredths <= 100 or abs(fraction * 100 - hundredths) > 1e-9:
        raise ValueError(f"percentile fraction must be hundredths in [0, 1], not {fraction!r}")
    if not values:
        return None
    if hundredths in (0, 100) or len(values) == 1:
        return min(values) if hundredths == 0 else max(values)
    # "inclusive": the data are the whole population, the method of percentile_cont.
    return statistics.quantiles(values, n=100, method="inclusive")[hundredths - 1]


def _lag_of(values: list[float]) -> Lag:
    return Lag(len(values), round(percentile(values, 0.5), 3),
               round(percentile(values, 0.99), 3), round(max(values), 3))


def worker_slots(using: str = "default") -> tuple[dict[str, int], dict[str, int]]:
    """Per queue: live workers serving it, and their summed concurrency (slots)."""
    workers: dict[str, int] = defaultdict(int)
    slots: dict[str, int] = defaultdict(int)
    for queues, concurrency in live_workers(using).values_list("queues", "concurrency"):
        for queue in queues:
            workers[queue] += 1
            slots[queue] += concurrency
    return dict(workers), dict(slots)


# --- the whole picture ---------------------------------------------------------------------


def queue_stats(using: str = "default") -> list[QueueStats]:
    """Every figure above for every queue the broker, the runs table or a live worker
    knows, with its shards, sorted by queue then shard. Raises BrokerUnavailable when the
    broker cannot be read (the database figures alone would misreport the depth)."""
    now = db_now(using)
    since = now - timedelta(seconds=WINDOW_S)
    depth = shard_depth(get_broker(using))
    oldest = oldest_due(using, now)
    finished = finished_counts(using, since)
    shard_lag, queue_lag = lags(using, since)
    serving, slots = worker_slots(using)

    def age(moment: datetime | None) -> float | None:
        return round(max((now - moment).total_seconds(), 0.0), 3) if moment else None

    def rates(counts: dict[str, int]) -> dict[str, float]:
        return {o: round(counts.get(o, 0) / WINDOW_S, 3) for o in OUTCOMES}

    pairs = set(depth) | set(oldest) | set(finished) | set(shard_lag)
    shards: dict[str, list[ShardStats]] = defaultdict(list)
    for queue, shard in sorted(pairs):
        d = depth.get((queue, shard), Depth())
        shards[queue].append(ShardStats(
            shard=shard, ready=d.ready, delayed=d.delayed, leased=d.leased,
            oldest_ready_age_s=age(oldest.get((queue, shard))),
            throughput_per_s=rates(finished.get((queue, shard), {})),
            lag_s=shard_lag.get((queue, shard)),
        ))
    stats = []
    for name in sorted(set(shards) | set(serving)):
        mine = shards.get(name, [])
        firsts = [oldest[(name, s.shard)] for s in mine if (name, s.shard) in oldest]
        totals: dict[str, int] = defaultdict(int)
        for s in mine:
            for outcome, n in finished.get((name, s.shard), {}).items():
                totals[outcome] += n
        stats.append(QueueStats(
            queue=name, ready=sum(s.ready for s in mine), delayed=sum(s.delayed for s in mine),
            leased=sum(s.leased for s in mine),
            oldest_ready_age_s=age(min(firsts)) if firsts else None,
            live_workers=serving.get(name, 0), worker_slots=slots.get(name, 0),
            throughput_per_s=rates(totals), lag_s=queue_lag.get(name), shards=mine,
        ))
    return stats
