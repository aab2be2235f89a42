"""The dashboard's figures in one JSON-able snapshot (docs/admin.md, "Dashboard").

Queue depth and live workers come from runs/metrics/stats.py, so the dashboard, /api/queues/ and
metrics agree. Throughput and lag over the last hour are bucketed per minute:

* started per second: runs whose (latest) attempt started in that minute, over 60 s (None
  for the minute still under way, whose runs only count in the totals);
* succeeded / dead per second: runs that reached that state in that minute;
* lag p50 / p99: ``started_at`` minus ``scheduled_at`` (or ``created_at``, if later) of
  runs started in that minute on their first attempt (a retry's start is backoff by
  design, not lag), catch-up runs left out (late on purpose; counted apart in the
  totals: docs/cron.md, "Catch-up runs"). Jitter, when a schedule has it, is part of the
  lag, as docs/admin.md defines lag.

Percentiles are interpolated like PostgreSQL's ``percentile_cont``: computed in the
database there, in Python on SQLite (the embedded default, meant for modest load).
Only runs finished in the window or not finished at all are read, which the
``(state, finished_at)`` index serves, so the cost follows the last hour's runs, not the
whole history.
"""

from collections import defaultdict
from datetime import UTC, datetime, timedelta

from django.db import connections
from django.db.models import Aggregate, Count, DurationField, F, Q
from django.db.models.functions import TruncMinute
from django.urls import reverse

from jobs.models import SchedulerPartition
from runs.clock import db_now
from runs.daemons import ownership
from runs.metrics.stats import live_workers, percentile, queue_stats
from runs.models import LAG_FROM, Run, RunState

WINDOW_MINUTES = 60
OWNERSHIP_ROWS = 30  # newest partition and shard tenures the dashboard lists
UNFINISHED = (RunState.SCHEDULED, RunState.QUEUED, RunState.RUNNING, RunState.RETRYING)
ENDED = (RunState.SUCCEEDED, RunState.DEAD, RunState.CANCELLED)


class PercentileCont(Aggregate):
    """PostgreSQL's ``percentile_cont(fraction) WITHIN GROUP (ORDER BY expression)``;
    ``fraction`` in [0, 1]. The result has the expression's type (an interval for a lag)."""

    function = "percentile_cont"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"

    def __init__(self, expression, fraction: float, **extra):
        if not 0 <= fraction <= 1:
            raise ValueError(f"percentile fraction must be in [0, 1], not {fraction!r}")
        super().__init__(expression, fraction=repr(float(fraction)), **extra)


def _minute(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(second=0, microsecond=0)


def _started_in_window(using: str, since: datetime):
    # Written so PostgreSQL can use run_state_finished (state, finished_at) for both halves.
    return Run.objects.using(using).filter(
        Q(state__in=ENDED, finished_at__gte=since) | Q(state__in=UNFINISHED),
        started_at__gte=since,
    )


def _lag_by_minute(using: str, since: datetime, in_database: bool) -> dict:
    first_attempts = _started_in_window(using, since).filter(attempt=1, catch_up=False)
    if in_database:
        lag = F("started_at") - LAG_FROM
        rows = (first_attempts.annotate(minute=TruncMinute("started_at")).values("minute")
                .annotate(p50=PercentileCont(lag, 0.5, output_field=DurationField()),
                          p99=PercentileCont(lag, 0.99, output_field=DurationField()))
                .order_by())
        return {_minute(r["minute"]): (r["p50"].total_seconds(), r["p99"].total_seconds())
                for r in rows}
    lags: dict[datetime, list[float]] = defaultdict(list)
    for started, scheduled, created in first_attempts.values_list(
            "started_at", "scheduled_at", "created_at"):
        lags[_minute(started)].append((started - max(scheduled, created)).total_seconds())
    result = {}
    for minute, values in lags.items():
        result[minute] = (percentile(values, 0.5), percentile(values, 0.99))
    return result


def series(using: str = "default", now: datetime | None = None,
           minutes: int = WINDOW_MINUTES, in_database: bool | None = None) -> dict:
    """Per-minute series for the last ``minutes`` minutes up to ``now`` (aware; default
    the database clock): ``minutes`` (ISO start of each minute, UTC), ``started_per_s``,
    ``succeeded_per_s``, ``dead_per_s`` (runs per second; None for the current minute,
    which is not over) and ``lag_p50_s``,
    ``lag_p99_s`` (seconds, None for a minute with no first attempt), plus the window's
    totals. ``in_database`` forces where percentiles are computed (default: in
    PostgreSQL, in Python elsewhere)."""
    now = now or db_now(using)
    if in_database is None:
        in_database = connections[using].vendor == "postgresql"
    end = _minute(now) + timedelta(minutes=1)
    since = end - timedelta(minutes=minutes)
    starts = [since + timedelta(minutes=i) for i in range(minutes)]

    started = {
        _minute(r["minute"]): r["n"] for r in
        _started_in_window(using, since).annotate(minute=TruncMinute("started_at"))
        .values("minute").annotate(n=Count("pk")).order_by()
    }
    ended = {
        _minute(r["minute"]): r for r in
        Run.objects.using(using).filter(state__in=(RunState.SUCCEEDED, RunState.DEAD),
                                        finished_at__gte=since)
        .annotate(minute=TruncMinute("finished_at")).values("minute")
        .annotate(succeeded=Count("pk", filter=Q(state=RunState.SUCCEEDED)),
                  dead=Count("pk", filter=Q(state=RunState.DEAD))).order_by()
    }
    lags = _lag_by_minute(using, since, in_database)

    current = _minute(now)

    def per_second(count: int, start: datetime) -> float | None:
        # The minute still under way has no rate yet: count/elapsed would spike at the top
        # of each minute when cron runs fire together, count/60 would dip. Its runs are in
        # the totals; its point appears once the minute is over.
        return None if start == current else round(count / 60, 3)

    def rounded(value):
        return None if value is None else round(value, 4)

    out = {"minutes": [], "started_per_s": [], "succeeded_per_s": [], "dead_per_s": [],
           "lag_p50_s": [], "lag_p99_s": []}
    for start in starts:
        out["minutes"].append(start.isoformat())
        out["started_per_s"].append(per_second(started.get(start, 0), start))
        done = ended.get(start, {})
        out["succeeded_per_s"].append(per_second(done.get("succeeded", 0), start))
        out["dead_per_s"].append(per_second(done.get("dead", 0), start))
        p50, p99 = lags.get(start, (None, None))
        out["lag_p50_s"].append(rounded(p50))
        out["lag_p99_s"].append(rounded(p99))
    out["totals"] = {
        "started": sum(started.values()),
        "catch_up": _started_in_window(using, since).filter(catch_up=True).count(),
        "succeeded": sum(r["succeeded"] for r in ended.values()),
        "dead": sum(r["dead"] for r in ended.values()),
    }
    return out


def workers(using: str = "default", now: datetime | None = None) -> list[dict]:
    """Live workers (runs/metrics/stats.py live_workers) with their current runs and the age of
    their last heartbeat in seconds."""
    now = now or db_now(using)
    live = list(live_workers(using).order_by("worker_id"))
    current: dict[str, list[dict]] = defaultdict(list)
    running = (Run.objects.using(using).filter(state=RunState.RUNNING,
                                               worker_id__in=[w.worker_id for w in live])
               .order_by("started_at").values("pk", "job_id", "job__name", "attempt",
                                              "started_at", "worker_id"))
    for run in running:
        current[run["worker_id"]].append({
            "id": run["pk"], "job_id": run["job_id"], "job": run["job__name"],
            "attempt": run["attempt"], "started_at": run["started_at"].isoformat(),
            "url": reverse("admin:runs_run_change", args=[run["pk"]]),
        })
    return [{
        "worker_id": w.worker_id, "hostname": w.hostname, "pid": w.pid, "queues": w.queues,
        "concurrency": w.concurrency, "started_at": w.started_at.isoformat(),
        "last_heartbeat_at": w.last_heartbeat_at.isoformat(),
        "heartbeat_age_s": round(max((now - w.last_heartbeat_at).total_seconds(), 0.0), 1),
        "runs": current.get(w.worker_id, []),
    } for w in live]


def partitions(using: str = "default", now: datetime | None = None) -> list[dict]:
    """Which scheduler owns which partitions: one entry per owner (``owner`` empty for
    partitions nobody holds a live lease on), with partition numbers and the seconds until
    the owner's earliest lease expires."""
    now = now or db_now(using)
    owners: dict[str, dict] = {}
    for p in SchedulerPartition.objects.using(using).order_by("number"):
        live = bool(p.owner) and p.lease_expires_at is not None and p.lease_expires_at > now
        owner = p.owner if live else ""
        entry = owners.setdefault(owner, {"owner": owner, "partitions": [],
                                          "lease_expires_in_s": None})
        entry["partitions"].append(p.number)
        if live:
            left = round((p.lease_expires_at - now).total_seconds(), 1)
            current = entry["lease_expires_in_s"]
            entry["lease_expires_in_s"] = left if current is None else min(current, left)
    return sorted(owners.values(), key=lambda e: (e["owner"] == "", e["owner"]))


def snapshot(using: str = "default", history: str | None = None) -> dict:
    """Everything the dashboard shows, JSON-able: ``now`` (database clock), ``totals``,
    ``queues`` (runs/metrics/stats.py), ``series`` (last hour per minute), ``workers``,
    ``partitions``, ``ownership`` (the newest OWNERSHIP_ROWS tenures, runs/daemons/ownership.py).
    ``history``: the alias the history figures (series, dead letter count, ownership)
    are read from, a read replica's (docs/scaling.md, "Read replicas"); default ``using``."""
    history = history or using
    now = db_now(using)
    queues = [q.as_dict() for q in queue_stats(using)]
    chart = series(history, now=now)
    window = chart.pop("totals")
    live = workers(using, now=now)
    totals = {
        "ready": sum(q["ready"] for q in queues),
        "delayed": sum(q["delayed"] for q in queues),
        "leased": sum(q["leased"] for q in queues),
        "dead_letter": Run.objects.using(history).filter(state=RunState.DEAD).count(),
        "live_workers": len(live),
        "started_last_hour": window["started"],
        "catch_up_last_hour": window["catch_up"],
        "succeeded_last_hour": window["succeeded"],
        "dead_last_hour": window["dead"],
    }
    return {"now": now.isoformat(), "totals": totals, "queues": queues, "series": chart,
            "workers": live, "partitions": partitions(using, now=now),
            "ownership": ownership.history(OWNERSHIP_ROWS, history)}

