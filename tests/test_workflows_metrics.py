"""The workflows' families on /metrics (docs/workflows.md, "Metrics"): workflow runs by
state, and the delay from a node's last upstream success (NodeRun.ready_at) to its first
attempt's start, as a gauge histogram and quantiles, counting only nodes with upstreams
started in the window. The times are set directly (test setup), so the figures are
exact."""

from datetime import timedelta

import pytest

from runs.clock import db_now
from runs.models import Attempt, AttemptOutcome, Run, RunState
from tests.test_metrics import scrape
from workflows import control, services
from workflows.models import NodeRun, NodeState, WorkflowRun

pytestmark = pytest.mark.django_db

NODES = [{"name": n, "handler": "noop"} for n in "abc"]


def started(node_run: NodeRun, ready_at, delay_s: float) -> None:
    """Give ``node_run`` a run whose first attempt started ``delay_s`` after ``ready_at``
    and succeeded."""
    begun = ready_at + timedelta(seconds=delay_s)
    if node_run.run_id is None:
        run = Run.objects.create(job=node_run.node.job, scheduled_at=ready_at, run_at=ready_at)
        node_run.run_id = run.pk
    Run.objects.filter(pk=node_run.run_id).update(
        state=RunState.SUCCEEDED, attempt=1, started_at=begun, finished_at=begun)
    Attempt.objects.create(run_id=node_run.run_id, number=1, worker_id="w", started_at=begun,
                           finished_at=begun, outcome=AttemptOutcome.SUCCEEDED)
    NodeRun.objects.filter(pk=node_run.pk).update(state=NodeState.SUCCEEDED,
                                                  run_id=node_run.run_id, ready_at=ready_at)


def test_workflow_runs_are_counted_by_state():
    wf = services.create_workflow("wf", NODES, [["a", "b"]])
    services.trigger(wf)
    control.cancel_workflow_run(services.start_workflow_run(wf, run_key="k"))

    samples = scrape()

    assert samples[("scheduler_workflow_runs", (("state", "running"),))] == 1
    assert samples[("scheduler_workflow_runs", (("state", "cancelled"),))] == 1
    assert samples[("scheduler_workflow_runs", (("state", "succeeded"),))] == 0


def test_the_start_delay_counts_the_nodes_with_upstreams_started_in_the_window():
    wf = services.create_workflow("wf", NODES, [["a", "b"], ["a", "c"]])
    wr = services.trigger(wf)
    now = db_now()
    by_name = {n.node.name: n for n in NodeRun.objects.filter(workflow_run=wr)
               .select_related("node__job")}
    started(by_name["a"], now - timedelta(seconds=5), 3.0)  # no upstream: left out
    started(by_name["b"], now - timedelta(seconds=2), 0.02)
    started(by_name["c"], now - timedelta(seconds=2), 0.2)

    samples = scrape()

    bucket = "scheduler_workflow_node_start_delay_seconds_bucket"
    assert samples[(bucket, (("le", "0.01"),))] == 0
    assert samples[(bucket, (("le", "0.025"),))] == 1
    assert samples[(bucket, (("le", "0.25"),))] == 2
    assert samples[(bucket, (("le", "+Inf"),))] == 2
    assert samples[("scheduler_workflow_node_start_delay_seconds_gcount", ())] == 2
    quantile = "scheduler_workflow_node_start_delay_quantile_seconds"
    assert samples[(quantile, (("quantile", "0.5"),))] == pytest.approx(0.11)
    assert samples[(quantile, (("quantile", "1"),))] == pytest.approx(0.2)


def test_a_node_started_before_the_window_is_not_counted():
    wf = services.create_workflow("wf", NODES, [["a", "b"]])
    wr = services.trigger(wf)
    long_ago = db_now() - timedelta(minutes=10)
    started(NodeRun.objects.select_related("node__job").get(workflow_run=wr, node__name="b"),
            long_ago, 0.5)

    samples = scrape()

    assert samples[("scheduler_workflow_node_start_delay_seconds_gcount", ())] == 0
    assert not any(name == "scheduler_workflow_node_start_delay_quantile_seconds"
                   for name, _ in samples)


def test_a_running_workflow_run_with_nothing_in_flight_is_stalled_until_reconciled():
    from workflows.reconcile import reconcile

    wf = services.create_workflow("wf", NODES, [["a", "b"], ["a", "c"]])
    wr = services.trigger(wf)
    paused = services.start_workflow_run(wf, run_key="paused")
    control.pause_workflow_run(paused)
    assert scrape()[("scheduler_workflow_runs_stalled", ())] == 0
    # As if a's run had been lost before the engine was told: nothing in flight.
    NodeRun.objects.filter(workflow_run=wr, node__name="a").update(state="pending",
                                                                   run_id=None)

    assert scrape()[("scheduler_workflow_runs_stalled", ())] == 1

    reconcile()
    assert scrape()[("scheduler_workflow_runs_stalled", ())] == 0


def test_the_oldest_progress_age_is_the_running_workflow_run_idle_longest():
    samples = scrape()
    assert samples[("scheduler_workflow_run_oldest_progress_age_seconds", ())] == 0
    wf = services.create_workflow("wf", NODES, [["a", "b"]])
    idle, busy, paused = (services.start_workflow_run(wf, run_key=k)
                          for k in ("idle", "busy", "paused"))
    now = db_now()
    WorkflowRun.objects.filter(pk__in=[idle.pk, busy.pk, paused.pk]).update(
        created_at=now - timedelta(hours=3))
    NodeRun.objects.filter(workflow_run__in=[idle, paused]).update(
        ready_at=now - timedelta(hours=2))
    NodeRun.objects.filter(workflow_run=busy).update(ready_at=now - timedelta(hours=2),
                                                     finished_at=now - timedelta(minutes=1))
    control.pause_workflow_run(paused)  # a paused one waits on purpose: left out

    age = scrape()[("scheduler_workflow_run_oldest_progress_age_seconds", ())]

    assert 2 * 3600 <= age < 2 * 3600 + 60
