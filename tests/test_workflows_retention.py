"""The history retention beside live workflow runs (docs/workflows.md, "Results"): the
run of a node that succeeded holds the result its downstream nodes read, so the
retention keeps it while its workflow run can still start one of them (running, paused,
or failed with a dead node a requeue resumes), by the row prune and by the drop of a
time partition alike."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.registry import handler
from runs import services as run_services
from runs.clock import db_now
from runs.history import time_partitions as history_partitions
from runs.history.retention import drop_partitions, prune
from runs.models import Run
from tests.conftest import wait_until
from tests.test_history_partitions import layout, partitions_back  # noqa: F401
from tests.test_workflows_engine import drain, node, results, start, states, work
from workflows import control, services
from workflows.history import prune_workflow_runs
from workflows.models import NodeRun, WorkflowRun

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


@pytest.fixture
def pair(broker, settings):
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name,
                          "RETRY_BACKOFF_BASE_S": 0.05}
    return broker


@handler("wf.retention_flaky")
def flaky(ctx, payload):
    """Fails its first attempt, then returns what its upstreams returned."""
    if ctx.attempt < 2:
        raise ValueError("first attempt fails")
    return {"saw": dict(ctx.upstream)}


def a_done_while_paused(pair, wr=None):
    """A workflow run a -> b (``wr``, or a new one), paused once a has succeeded."""
    wr = wr or start(pair, [node("a"), node("b")], [["a", "b"]])
    assert control.pause_workflow_run(wr, using=pair.using)

    def a_done():
        work(pair)
        return states(services.get_workflow_run(wr.pk, using=pair.using))["a"] == "succeeded"

    wait_until(a_done, timeout=30, message="a to finish while paused")
    return wr


def test_the_row_prune_keeps_the_upstream_results_a_paused_workflow_run_still_needs(pair):
    wr = a_done_while_paused(pair)
    a_run = services.get_workflow_run(wr.pk, using=pair.using)["nodes"][0]["run_id"]

    pruned = prune(timezone.now() + timedelta(days=1), 100, pair.using)

    assert pruned.runs == 0
    assert Run.objects.using(pair.using).filter(pk=a_run).exists()
    assert control.resume_workflow_run(wr, using=pair.using)
    view = drain(pair, wr)
    assert view["state"] == "succeeded"
    assert results(pair, view)["b"]["saw"] == {"a": {"me": "a", "saw": {}}}
    # Once the workflow run is over, its runs go like any other.
    assert prune(timezone.now() + timedelta(days=1), 100, pair.using).runs == 2


@pytest.mark.usefixtures("layout")
def test_a_partition_drop_keeps_the_upstream_results_a_paused_workflow_run_needs(pair):
    if not history_partitions.partitioned(pair.using) or pair.using != "default":
        pytest.skip("time partitions are PostgreSQL's (the layout fixture's: default)")
    partitions_back(12)
    wf = services.create_workflow("wf", [node("a"), node("b")], [["a", "b"]])
    wr = services.start_workflow_run(wf, scheduled_at=db_now() - timedelta(days=10))
    a_done_while_paused(pair, wr)
    a_run = services.get_workflow_run(wr.pk)["nodes"][0]["run_id"]
    # a finished nine days ago, as far as the retention of seven days can tell.
    Run.objects.filter(pk=a_run).update(finished_at=db_now() - timedelta(days=9))

    drop_partitions(db_now() - timedelta(days=7))

    assert Run.objects.filter(pk=a_run).exists()
    assert control.resume_workflow_run(wr)
    view = drain(pair, wr)
    assert results(pair, view)["b"]["saw"] == {"a": {"me": "a", "saw": {}}}


def test_a_failed_workflow_run_keeps_its_results_while_a_requeue_can_resume_it(pair):
    wr = start(pair, [node("a"), node("b", "wf.retention_flaky", max_attempts=1)],
               [["a", "b"]])
    assert drain(pair, wr)["state"] == "failed"
    view = services.get_workflow_run(wr.pk, using=pair.using)
    a_run, b_run = (n["run_id"] for n in view["nodes"])

    assert prune(timezone.now() + timedelta(days=1), 100, pair.using).runs == 0

    assert run_services.requeue([b_run], using=pair.using) == 1
    view = drain(pair, wr)
    assert view["state"] == "succeeded"
    assert results(pair, view)["b"] == {"saw": {"a": {"me": "a", "saw": {}}}}
    assert Run.objects.using(pair.using).filter(pk=a_run).exists()


def test_workflow_runs_ended_for_good_go_after_the_retention_with_their_node_runs(
        pair, settings):
    settings.SCHEDULER = {**settings.SCHEDULER, "HISTORY_RETENTION_S": 7 * 86_400}
    done = start(pair, [node("a")], [])
    assert drain(pair, done)["state"] == "succeeded"
    failed = start(pair, [node("f", "wf.retention_flaky", max_attempts=1)], [])
    assert drain(pair, failed)["state"] == "failed"
    live = a_done_while_paused(pair)
    workflow_runs = WorkflowRun.objects.using(pair.using)
    workflow_runs.filter(pk__in=[done.pk, failed.pk]).update(
        finished_at=timezone.now() - timedelta(days=8))

    assert prune_workflow_runs(using=pair.using) == 1

    assert set(workflow_runs.values_list("pk", flat=True)) == {failed.pk, live.pk}
    assert not NodeRun.objects.using(pair.using).filter(workflow_run_id=done.pk).exists()
    # The failed one waited for its dead node; discarded, nothing can resume it.
    dead = NodeRun.objects.using(pair.using).get(workflow_run_id=failed.pk).run_id
    assert run_services.discard([dead], using=pair.using) == 1
    assert prune_workflow_runs(using=pair.using) == 1
    assert set(workflow_runs.values_list("pk", flat=True)) == {live.pk}
    settings.SCHEDULER = {**settings.SCHEDULER, "HISTORY_RETENTION_S": 0}
    workflow_runs.update(state="succeeded", finished_at=timezone.now() - timedelta(days=8))
    assert prune_workflow_runs(using=pair.using) == 0
