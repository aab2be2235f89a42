"""The Prometheus endpoint, /metrics: the scaling signal of docs/scaling.md.

The web process executes no runs, so counters kept in its memory would say nothing about
the workers. Every figure is computed at scrape time from the database and the broker by
runs/metrics/stats.py, the same numbers /api/queues/ shows, and exposed as gauges by one custom
collector on a private registry (no process metrics of whichever web worker answered).

Access (docs/security.md): a scrape sends ``Authorization: Bearer <token>`` with the
token of the setting or environment variable ``SCHEDULER_METRICS_TOKEN``. With no token
configured the endpoint is closed (403) unless the operator opens it explicitly with
``SCHEDULER_METRICS_OPEN=true``, for deployments that reach it only from an internal
network (docs/scaling.md).
"""

import hmac
import logging
from datetime import timedelta

from django.http import HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from runs.brokers import get_broker
from runs.clock import db_now
from runs.daemons import ownership
from runs.metrics import stats
from runs.metrics.flow import FlowCollector
from runs.metrics.health import HealthCollector
from runs.models import ChildRecycleCount
from scheduler_core import conf
from scheduler_core.exceptions import BrokerUnavailable

log = logging.getLogger("scheduler.metrics")

SHARD = ["queue", "shard"]


class SchedulerCollector(Collector):
    """Gauges per queue and shard, read at each scrape from database alias ``using``.

    ``scheduler_broker_up`` is 0 when the broker could not be read; the depth gauges are
    then absent for that scrape (a zero would look like an empty queue) while throughput,
    lag and oldest ready age, which come from the database, are still exposed.
    """

    def __init__(self, using: str = "default"):
        self.using = using

    def describe(self):
        # Without this, registering the collector would call collect() and query the
        # database at import time.
        return []

    def collect(self):
        using = self.using
        now = db_now(using)
        since = now - timedelta(seconds=stats.WINDOW_S)
        broker_up = GaugeMetricFamily(
            "scheduler_broker_up", "1 if the broker answered this scrape, else 0.")
        try:
            depth = stats.shard_depth(get_broker(using))
            broker_up.add_metric([], 1)
        except BrokerUnavailable as exc:
            log.warning("metrics: broker unreadable: %s", exc)
            depth = None
            broker_up.add_metric([], 0)
        yield broker_up

        oldest = stats.oldest_due(using, now)
        finished = stats.finished_counts(using, since)
        lag, _ = stats.lags(using, since)
        catch_ups = stats.catch_ups(using, since)
        pairs = sorted(set(depth or {}) | set(oldest) | set(finished) | set(lag)
                       | set(catch_ups))

        if depth is not None:
            families = {
                name: GaugeMetricFamily(f"scheduler_queue_{name}", doc, labels=SHARD)
                for name, doc in (
                    ("ready", "Runs due and waiting for a worker, in the broker."),
                    ("delayed", "Runs waiting for their run_at, in the broker."),
                    ("leased", "Runs leased by a worker (running), in the broker."),
                )
            }
            for pair in pairs:
                d = depth.get(pair, stats.Depth())
                labels = [pair[0], str(pair[1])]
                families["ready"].add_metric(labels, d.ready)
                families["delayed"].add_metric(labels, d.delayed)
                families["leased"].add_metric(labels, d.leased)
            yield from families.values()

        age = GaugeMetricFamily(
            "scheduler_queue_oldest_ready_age_seconds",
            "Seconds the oldest due, unstarted run of an active job has waited; 0 if none.",
            labels=SHARD)
        for pair in pairs:
            waited = (now - oldest[pair]).total_seconds() if pair in oldest else 0.0
            age.add_metric([pair[0], str(pair[1])], max(waited, 0.0))
        yield age

        throughput = GaugeMetricFamily(
            "scheduler_queue_throughput_runs_per_second",
            f"Runs that reached a final state (outcome) per second over the last "
            f"{stats.WINDOW_S} s.", labels=[*SHARD, "outcome"])
        for pair in pairs:
            counts = finished.get(pair, {})
            for outcome in stats.OUTCOMES:
                throughput.add_metric([pair[0], str(pair[1]), outcome],
                                      counts.get(outcome, 0) / stats.WINDOW_S)
        yield throughput

        lag_s = GaugeMetricFamily(
            "scheduler_queue_lag_seconds",
            f"Seconds from run_at to start of the runs started in the last {stats.WINDOW_S} s, "
            f"catch-up runs left out (quantile 0.5, 0.99, 1 = max); absent when none "
            f"started.",
            labels=[*SHARD, "quantile"])
        started = GaugeMetricFamily(
            "scheduler_queue_started_runs",
            f"Runs started in the last {stats.WINDOW_S} s that are running or finished "
            f"(the lag sample: catch-up runs left out).", labels=SHARD)
        catch_up = GaugeMetricFamily(
            "scheduler_queue_started_catch_up_runs",
            f"Catch-up runs (for occurrences missed while the scheduler was down or held by "
            f"a pause) started in the last {stats.WINDOW_S} s; not in the lag.",
            labels=SHARD)
        for pair in pairs:
            labels = [pair[0], str(pair[1])]
            sample = lag.get(pair)
            started.add_metric(labels, sample.count if sample else 0)
            catch_up.add_metric(labels, catch_ups.get(pair, 0))
            if sample:
                lag_s.add_metric([*labels, "0.5"], sample.p50_s)
                lag_s.add_metric([*labels, "0.99"], sample.p99_s)
                lag_s.add_metric([*labels, "1"], sample.max_s)
        yield lag_s
        yield started
        yield catch_up

        serving, slots = stats.worker_slots(using)
        workers = GaugeMetricFamily(
            "scheduler_queue_live_workers", "Live worker processes serving the queue.",
            labels=["queue"])
        capacity = GaugeMetricFamily(
            "scheduler_queue_worker_slots",
            "Runs the live workers serving the queue can execute at once (summed concurrency).",
            labels=["queue"])
        for queue in sorted(set(serving) | {pair[0] for pair in pairs}):
            workers.add_metric([queue], serving.get(queue, 0))
            capacity.add_metric([queue], slots.get(queue, 0))
        yield workers
        yield capacity

        changes = CounterMetricFamily(
            "scheduler_lease_changes",
            "Ownership changes of scheduler partitions and dispatcher shards (kind) since "
            "the table was created, by event: acquired, taken_over (from a holder whose "
            "lease expired), lost (noticed by the loser), lapsed (its own lease expired "
            "unnoticed), released, rebalanced (docs/architecture.md).",
            labels=["kind", "event"])
        for kind, event, count in ownership.counters(using):
            changes.add_metric([kind, event], count)
        yield changes

        recycled = CounterMetricFamily(
            "scheduler_worker_child_recycles",
            "Worker child processes replaced by recycling since the table was created, by "
            "reason: runs (MAX_RUNS_PER_CHILD reached), memory (MAX_MEMORY_PER_CHILD_MB "
            "reached); counted by the workers, added at their heartbeat.",
            labels=["reason"])
        for reason, count in (ChildRecycleCount.objects.using(using).order_by("reason")
                              .values_list("reason", "count")):
            recycled.add_metric([reason], count)
        yield recycled


registry = CollectorRegistry(auto_describe=False)
registry.register(SchedulerCollector())
registry.register(HealthCollector())
registry.register(FlowCollector())


def metrics_token() -> str:
    """The bearer token a scrape must send; empty when none is configured."""
    return conf.get("METRICS_TOKEN")


def authorized(request) -> bool:
    """True when the request carries the configured token as a bearer token, or when no
    token is configured and the operator opened the endpoint (METRICS_OPEN)."""
    token = metrics_token()
    if not token:
        return conf.get("METRICS_OPEN")
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(),
                                                              token.encode())


@require_GET
def metrics_view(request):
    """GET /metrics: every gauge above in Prometheus's text format; 401 without the right
    bearer token, 403 when no token is configured and the endpoint is not opened."""
    if authorized(request):
        return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
    if not metrics_token():
        return HttpResponse(
            "/metrics is closed: the operator has configured no SCHEDULER_METRICS_TOKEN "
            "(or SCHEDULER_METRICS_OPEN=true to serve it to anyone)\n", status=403,
            content_type="text/plain")
    response = HttpResponse("a bearer token is required\n", status=401,
                            content_type="text/plain")
    response["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return response
