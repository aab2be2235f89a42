"""The /metrics gauges of flow control by handler and by key (docs/isolation.md, "Rate
limits" and "Concurrency keys"), read at each scrape from the database: the rate limits in
force, and per concurrency key template the runs running and waiting and the key values
at their limit. Labels carry templates, never key values, so the series stay few."""

from django.db.models import Count, Q
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from runs.flow.models import RateLimit
from runs.models import PENDING_STATES, Run, RunState

LIMIT = ["scope", "name"]


class FlowCollector(Collector):
    """Gauges of the rate limits and concurrency keys of database alias ``using``."""

    def __init__(self, using: str = "default"):
        self.using = using

    def describe(self):
        return []  # no query at registration

    def collect(self):
        rate = GaugeMetricFamily("scheduler_rate_limit_per_second",
                                 "Runs started per second a rate limit allows, by scope "
                                 "(handler or key) and name.", labels=LIMIT)
        burst = GaugeMetricFamily("scheduler_rate_limit_burst",
                                  "The bucket size in runs of a rate limit.", labels=LIMIT)
        for scope, name, per_s, size in (RateLimit.objects.using(self.using)
                                         .order_by("scope", "name")
                                         .values_list("scope", "name", "rate", "burst")):
            rate.add_metric([scope, name], per_s)
            burst.add_metric([scope, name], size)
        yield rate
        yield burst
        running = GaugeMetricFamily(
            "scheduler_concurrency_key_runs", "Runs with a concurrency key, by its "
            "template and state (running, waiting).", labels=["template", "state"])
        full = GaugeMetricFamily(
            "scheduler_concurrency_key_values_at_limit", "Values of a concurrency key "
            "template with as many runs running as their limit allows.", labels=["template"])
        rows = (Run.objects.using(self.using)
                .filter(state__in=[RunState.RUNNING, *PENDING_STATES])
                .exclude(job__concurrency_key="")
                # per owner too: each owner's values count apart (runs/flow/control.py, scoped)
                .values_list("job__concurrency_key", "job__concurrency_limit",
                             "job__owner_id")
                .annotate(running=Count("pk", filter=Q(state=RunState.RUNNING)),
                          waiting=Count("pk", filter=~Q(state=RunState.RUNNING))))
        totals: dict[str, list[int]] = {}
        for key, limit, _owner, n_running, n_waiting in rows:
            row = totals.setdefault(key.partition("=")[0], [0, 0, 0])
            row[0] += n_running
            row[1] += n_waiting
            row[2] += n_running >= limit
        for template in sorted(totals):
            n_running, n_waiting, at_limit = totals[template]
            running.add_metric([template, "running"], n_running)
            running.add_metric([template, "waiting"], n_waiting)
            full.add_metric([template], at_limit)
        yield running
        yield full
