"""The workflows' families on /metrics (docs/workflows.md, "Metrics"; docs/scaling.md):
workflow runs by state, the running ones that are stalled or have made no progress for
longest, and the time from a node's last upstream success to its own start. Registered
on runs/metrics/endpoint.py's private registry when Django starts (workflows/wiring.py); like
every figure there, read at scrape time from the database, since the web process that
answers the scrape executes no runs.

The start delay of a node is its first attempt's start minus ``NodeRun.ready_at``, the
moment (database clock) of the ack of its last upstream's success, which is also when
its run was made. Only nodes with upstreams count (a node without them waits for its
workflow run's start, which the runs' own lag already measures), over the nodes whose
first attempt started in the last ``runs.metrics.stats.WINDOW_S`` (60) seconds.
"""

from datetime import datetime, timedelta

from django.db.models import Count, Exists, F, Max, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce, Greatest
from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from runs.clock import db_now
from runs.metrics import stats
from runs.models import TERMINAL_STATES, Attempt, Run, RunState
from workflows.models import NodeRun, NodeState, WorkflowEdge, WorkflowRun, WorkflowRunState

# Upper bounds (seconds): the target is a p99 under 50 ms (docs/workflows.md, "Metrics"),
# so the fine buckets sit below it.
DELAY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0)


def workflow_run_counts(using: str = "default") -> dict[str, int]:
    """Every workflow run by state (each WorkflowRunState, 0 when none): one grouped
    count over the table."""
    counts = dict.fromkeys(WorkflowRunState.values, 0)
    for state, count in (WorkflowRun.objects.using(using).order_by().values("state")
                         .annotate(n=Count("id")).values_list("state", "n")):
        counts[state] = count
    return counts


def stalled_and_oldest_progress(now: datetime, using: str = "default") -> tuple[int, float]:
    """``(stalled, age)`` over the running (not paused) workflow runs: how many have no
    node running, so nothing in flight can move them (each has pending nodes no run was
    made for, or should have ended: the reconcile repairs both within
    WORKFLOW_RECONCILE_S while a scheduler holds the workflow's partition), and the
    longest time (s; 0 when none runs) any of them has gone without progress, since the
    latest of its start, a node's run made (``ready_at``) and a node finished."""
    running = WorkflowRun.objects.using(using).filter(state=WorkflowRunState.RUNNING)
    stalled = running.exclude(Exists(NodeRun.objects.using(using).filter(
        workflow_run_id=OuterRef("pk"), state=NodeState.RUNNING))).count()
    # Coalesce each: SQLite's max() of several values is NULL when one is.
    last = (running.order_by().values("pk").annotate(last=Greatest(
        F("created_at"), Coalesce(Max("node_runs__ready_at"), F("created_at")),
        Coalesce(Max("node_runs__finished_at"), F("created_at"))))
        .order_by("last").values_list("last", flat=True).first())
    return stalled, (max((now - last).total_seconds(), 0.0) if last is not None else 0.0)


def start_delays(using: str, since: datetime) -> list[float]:
    """Seconds from ready_at to the first attempt's start of the nodes with upstreams
    whose first attempt started at or after ``since`` (any order)."""
    # Runs started in the window are running or finished since it began: the indexes the
    # runs' own lag uses (runs/metrics/stats.py); each is then one unique-index probe away from
    # its node run and its first attempt.
    started = Run.objects.using(using).filter(
        Q(state=RunState.RUNNING) | Q(state__in=TERMINAL_STATES, finished_at__gte=since),
        started_at__gte=since).values("pk")
    first = Attempt.objects.using(using).filter(run_id=OuterRef("run_id"), number=1)
    has_upstream = WorkflowEdge.objects.using(using).filter(downstream_id=OuterRef("node_id"))
    rows = (NodeRun.objects.using(using)
            .filter(run_id__in=Subquery(started), ready_at__isnull=False)
            .filter(Exists(has_upstream))
            .annotate(first_started=Subquery(first.values("started_at")[:1]))
            .filter(first_started__gte=since)
            .values_list("first_started", "ready_at"))
    return [max((begun - ready).total_seconds(), 0.0) for begun, ready in rows]


class WorkflowCollector(Collector):
    """``scheduler_workflow_runs{state}``, ``scheduler_workflow_runs_stalled``,
    ``scheduler_workflow_run_oldest_progress_age_seconds``,
    ``scheduler_workflow_node_start_delay_seconds``
    (a gauge histogram over the window) and its ``_quantile_seconds`` p50, p99 and max,
    read from database alias ``using`` at each scrape."""

    def __init__(self, using: str = "default"):
        self.using = using

    def describe(self):
        return []  # no query at registration (runs/metrics/endpoint.py says why)

    def collect(self):
        runs = GaugeMetricFamily(
            "scheduler_workflow_runs",
            "Workflow runs by state (running, paused: live; succeeded, failed, cancelled: "
            "their outcome), every workflow run the database holds.", labels=["state"])
        for state, count in workflow_run_counts(self.using).items():
            runs.add_metric([state], count)
        yield runs

        now = db_now(self.using)
        stalled, age = stalled_and_oldest_progress(now, self.using)
        yield GaugeMetricFamily(
            "scheduler_workflow_runs_stalled",
            "Running workflow runs with no node running: nothing in flight can move them "
            "(the workflow reconcile repairs them while a scheduler runs).", value=stalled)
        yield GaugeMetricFamily(
            "scheduler_workflow_run_oldest_progress_age_seconds",
            "The longest time any running workflow run has gone without progress (its "
            "start, a node's run made, a node finished); 0 when none runs.",
            value=round(age, 3))

        delays = start_delays(self.using, now - timedelta(seconds=stats.WINDOW_S))
        histogram = GaugeHistogramMetricFamily(
            "scheduler_workflow_node_start_delay_seconds",
            f"Seconds from a workflow node's last upstream success to its first attempt's "
            f"start, over the nodes (with upstreams) started in the last {stats.WINDOW_S} s.")
        buckets = [(str(bound), sum(1 for d in delays if d <= bound)) for bound in DELAY_BUCKETS]
        histogram.add_metric([], [*buckets, ("+Inf", len(delays))], sum(delays))
        yield histogram

        quantiles = GaugeMetricFamily(
            "scheduler_workflow_node_start_delay_quantile_seconds",
            f"The same delays' quantile 0.5, 0.99 and 1 (max) over the last {stats.WINDOW_S} "
            f"s; absent when no node with upstreams started.", labels=["quantile"])
        if delays:
            for label, fraction in (("0.5", 0.5), ("0.99", 0.99), ("1", 1.0)):
                quantiles.add_metric([label], round(stats.percentile(delays, fraction), 6))
        yield quantiles


COLLECTOR = WorkflowCollector()
