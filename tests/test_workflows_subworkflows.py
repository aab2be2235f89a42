"""Sub-workflow nodes on every broker/database pair, with real workers
(docs/workflows.md, "Sub-workflows"): a node starts a run of another workflow and ends
as it ends; the child's roots read the node's upstreams, the node's downstream reads the
child's leaves; a failing child fails the node by the downstream's trigger rules and a
requeue resumes both; cancel and pause of the parent reach the child; a child of a
cancelled or paused workflow, another owner's, or one too deep is refused; nothing is
made twice."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from jobs.models import OwnerPolicy
from jobs.registry import handler
from runs import services as run_services
from runs.clock import db_now
from runs.history.retention import prune
from runs.models import Run
from runs.tenancy.quotas import QuotaExceeded
from tests.conftest import wait_until
from tests.test_api_helpers import client_for
from tests.test_workflows_engine import drain, states, work
from workflows import control, reconcile, services
from workflows.execution import engine
from workflows.history import prune_workflow_runs
from workflows.models import NodeRun, Workflow, WorkflowRun
from workflows.validation import InvalidWorkflow

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


@pytest.fixture
def pair(broker, settings):
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name,
                          "RETRY_BACKOFF_BASE_S": 0.05}
    return broker


@handler("wf.sub.seed")
def seed(ctx, payload):
    return {"n": payload.get("n", 3)}


@handler("wf.sub.double")
def double(ctx, payload):
    """A child's root: doubles what the parent's upstream ``seed`` gave; fails on
    request while the attempt is at most ``fail_until``."""
    if ctx.attempt <= payload.get("fail_until", 0):
        raise ValueError("double fails on purpose")
    return {"doubled": ctx.upstream["seed"]["n"] * 2}


@handler("wf.sub.inc")
def inc(ctx, payload):
    return {"inc": ctx.upstream["double"]["doubled"] + 1}


@handler("wf.sub.report")
def report(ctx, payload):
    return {"child": ctx.upstream["child"]}


def child_workflow(using, owner=None, double=None, name="child", queue=None):
    """double -> inc: the child's root reads its parent's node's upstream ``seed``."""
    extra = {"queue": queue} if queue else {}
    return services.create_workflow(name, [
        {"name": "double", "handler": "wf.sub.double", **(double or {}), **extra},
        {"name": "inc", "handler": "wf.sub.inc", **extra}],
        [["double", "inc"]], owner=owner, using=using)


def parent_workflow(using, ref, owner=None, report=None):
    """seed -> child (runs workflow ``ref``) -> report."""
    return services.create_workflow("parent", [
        {"name": "seed", "handler": "wf.sub.seed", "payload": {"n": 5}},
        {"name": "child", "workflow": ref},
        {"name": "report", "handler": "wf.sub.report", **(report or {})}],
        [["seed", "child"], ["child", "report"]], owner=owner, using=using)


def run_result(using, view, name):
    run_id = {n["name"]: n["run_id"] for n in view["nodes"]}[name]
    return Run.objects.using(using).get(pk=run_id).result


def fan_out_only(broker, wr, held):
    """Run the parent's root until its child started (its nodes held in ``held``)."""
    def started():
        work(broker)
        return NodeRun.objects.using(broker.using).filter(
            workflow_run=wr, child_run_id__isnull=False).exists()

    wait_until(started, timeout=30, message="the child's start")


def child_of(using, wr) -> WorkflowRun:
    return WorkflowRun.objects.using(using).get(
        pk=NodeRun.objects.using(using).get(workflow_run=wr, node__name="child").child_run_id)


def test_a_sub_workflow_node_runs_its_child_and_passes_results_both_ways(pair):
    using = pair.using
    child_wf = child_workflow(using)
    wr = services.start_workflow_run(parent_workflow(using, "child"), using=using)

    view = drain(pair, wr)

    assert view["state"] == "succeeded", view
    assert states(view) == {"seed": "succeeded", "child": "succeeded", "report": "succeeded"}
    # The parent's downstream reads the child's leaves; the child's root read seed's 5.
    assert run_result(using, view, "report") == {"child": {"inc": {"inc": 11}}}
    child = child_of(using, wr)
    assert (child.workflow_id, child.state, child.started_by) == (
        child_wf.pk, "succeeded", "workflow")
    node = {n["name"]: n for n in view["nodes"]}["child"]
    assert node["workflow"] == child_wf.pk and node["run_id"] is None
    assert node["child"] == {"id": child.pk, "state": "succeeded", "nodes": {"succeeded": 2}}
    child_view = services.get_workflow_run(child.pk, using=using)
    assert child_view["parent"] == {"workflow_run": wr.pk, "node": "child"}
    assert WorkflowRun.objects.using(using).filter(workflow=child_wf).count() == 1


def test_a_failing_child_fails_the_node_and_a_requeue_resumes_both(pair):
    using = pair.using
    child_workflow(using, double={"max_attempts": 1, "payload": {"fail_until": 1}})
    wr = services.start_workflow_run(parent_workflow(using, "child"), using=using)

    view = drain(pair, wr)

    assert view["state"] == "failed"
    assert states(view) == {"seed": "succeeded", "child": "failed",
                            "report": "upstream_failed"}
    child = child_of(using, wr)
    error = {n["name"]: n["error"] for n in view["nodes"]}["child"]
    assert f"its workflow run {child.pk} failed" in error and "'double'" in error, error
    assert child.state == "failed"

    # Requeueing the child's dead run brings back the child, the node and the parent.
    dead = NodeRun.objects.using(using).get(workflow_run=child, node__name="double").run_id
    run_services.requeue([dead], using=using)
    assert WorkflowRun.objects.using(using).get(pk=wr.pk).state == "running"
    assert states(services.get_workflow_run(wr.pk, using=using)) == {
        "seed": "succeeded", "child": "running", "report": "pending"}
    view = drain(pair, wr)
    assert view["state"] == "succeeded", view
    assert run_result(using, view, "report") == {"child": {"inc": {"inc": 11}}}


def test_an_all_done_node_runs_after_a_failed_child(pair):
    using = pair.using
    child_workflow(using, double={"max_attempts": 1, "payload": {"fail_until": 1}})
    wr = services.start_workflow_run(
        parent_workflow(using, "child", report={"trigger_rule": "all_done"}), using=using)

    view = drain(pair, wr)

    assert (view["state"], states(view)["report"]) == ("failed", "succeeded")
    assert run_result(using, view, "report") == {"child": {"inc": None}}


def test_cancel_of_the_parent_cancels_the_child_and_its_runs(pair):
    using = pair.using
    child_workflow(using, queue="held")
    wr = services.start_workflow_run(parent_workflow(using, "child"), using=using)
    fan_out_only(pair, wr, "held")  # seed succeeds; the child's root waits on "held"
    child = child_of(using, wr)
    assert child.state == "running"

    assert control.cancel_workflow_run(wr, using=using)

    view = services.get_workflow_run(wr.pk, using=using)
    assert (view["state"], states(view)["child"]) == ("cancelled", "cancelled")
    child_view = services.get_workflow_run(child.pk, using=using)
    assert child_view["state"] == "cancelled"
    assert states(child_view) == {"double": "cancelled", "inc": "cancelled"}
    run = NodeRun.objects.using(using).get(workflow_run=child, node__name="double").run_id
    assert Run.objects.using(using).get(pk=run).state == "cancelled"


def test_cancel_of_the_child_cancels_the_node_and_the_parent_goes_on(pair):
    using = pair.using
    child_workflow(using, queue="held")
    wr = services.start_workflow_run(
        parent_workflow(using, "child", report={"trigger_rule": "all_done"}), using=using)
    fan_out_only(pair, wr, "held")

    assert control.cancel_workflow_run(child_of(using, wr), using=using)

    view = drain(pair, wr)
    assert view["state"] == "failed"
    assert states(view) == {"seed": "succeeded", "child": "cancelled", "report": "succeeded"}


def test_pause_and_resume_of_the_parent_reach_the_child(pair):
    using = pair.using
    child_workflow(using, queue="held")
    wr = services.start_workflow_run(parent_workflow(using, "child"), using=using)
    fan_out_only(pair, wr, "held")
    child = child_of(using, wr)

    assert control.pause_workflow_run(wr, using=using)
    assert WorkflowRun.objects.using(using).get(pk=child.pk).state == "paused"
    assert control.resume_workflow_run(wr, using=using)
    assert WorkflowRun.objects.using(using).get(pk=child.pk).state == "running"


@pytest.mark.parametrize("status", ["paused", "cancelled"])
def test_a_child_workflow_not_active_fails_the_node_and_starts_nothing(pair, status):
    using = pair.using
    child_wf = child_workflow(using)
    wr = services.start_workflow_run(parent_workflow(using, child_wf.pk), using=using)
    Workflow.objects.using(using).filter(pk=child_wf.pk).update(status=status)

    view = drain(pair, wr)

    assert states(view) == {"seed": "succeeded", "child": "failed",
                            "report": "upstream_failed"}
    assert f"is {status}: it starts no run" in {n["name"]: n["error"]
                                                for n in view["nodes"]}["child"]
    assert not WorkflowRun.objects.using(using).filter(workflow=child_wf).exists()


def test_the_owners_max_pending_refuses_a_child_and_nothing_is_made(pair):
    using = pair.using
    owner = User.objects.db_manager(using).create(username="nester")
    OwnerPolicy.objects.using(using).create(owner=owner, max_pending=3)
    services.create_workflow("big", [{"name": f"n{i}", "handler": "noop"} for i in range(5)],
                             owner=owner, using=using)
    wr = services.start_workflow_run(parent_workflow(using, "big", owner=owner), using=using)

    view = drain(pair, wr)

    assert states(view)["child"] == "failed"
    error = {n["name"]: n["error"] for n in view["nodes"]}["child"]
    assert "would take the owner over max_pending" in error, error
    assert WorkflowRun.objects.using(using).count() == 1


def test_a_repeated_start_makes_no_child_twice(pair):
    using = pair.using
    child_workflow(using, queue="held")
    wr = services.start_workflow_run(parent_workflow(using, "child"), using=using)
    fan_out_only(pair, wr, "held")
    seed_node = NodeRun.objects.using(using).get(workflow_run=wr, node__name="seed")

    with transaction.atomic(using=using):  # the ack told again, and the reconcile
        engine.start_ready([wr.pk], db_now(using), using, below={seed_node.node_id})
    reconcile.reconcile(using=using)

    assert WorkflowRun.objects.using(using).count() == 2
    assert NodeRun.objects.using(using).filter(child_run_id__isnull=False).count() == 1


def test_the_reconcile_ends_a_node_whose_child_ended_untold(pair):
    using = pair.using
    child_workflow(using, queue="held")
    wr = services.start_workflow_run(parent_workflow(using, "child"), using=using)
    fan_out_only(pair, wr, "held")
    child = child_of(using, wr)
    # Ended behind the engine's back, as if the telling had been lost.
    WorkflowRun.objects.using(using).filter(pk=child.pk).update(state="failed", error="lost")

    reconcile.reconcile(using=using)

    view = services.get_workflow_run(wr.pk, using=using)
    assert view["state"] == "failed"
    assert states(view) == {"seed": "succeeded", "child": "failed",
                            "report": "upstream_failed"}


def test_the_definition_of_a_sub_workflow_node_is_checked(settings):
    using = "default"
    me = User.objects.create(username="me")
    other = User.objects.create(username="other")
    theirs = child_workflow(using, owner=other, name="theirs")
    with pytest.raises(InvalidWorkflow) as bad:
        parent_workflow(using, theirs.pk, owner=me)
    assert "names no workflow" in bad.value.errors["nodes[1].workflow"]
    with pytest.raises(InvalidWorkflow) as bad:
        parent_workflow(using, "nope", owner=me)
    assert "names no workflow 'nope'" in bad.value.errors["nodes[1].workflow"]
    with pytest.raises(InvalidWorkflow) as bad:
        services.create_workflow("p", [{"name": "c", "workflow": 1, "handler": "noop"},
                                       {"name": "d", "workflow": True}], owner=me)
    assert "takes no handler" in bad.value.errors["nodes[0].handler"]
    assert "must be a workflow's id" in bad.value.errors["nodes[1].workflow"]
    with pytest.raises(InvalidWorkflow) as bad:
        services.create_workflow("p", [{"name": "c", "handler": "workflows.subworkflow"}])
    assert "is internal" in bad.value.errors["nodes[0].handler"]
    mine = child_workflow(using, owner=me, name="mine")
    control.cancel_workflow(mine)
    with pytest.raises(InvalidWorkflow) as bad:
        parent_workflow(using, "mine", owner=me)
    assert "is cancelled" in bad.value.errors["nodes[1].workflow"]
    assert Workflow.objects.filter(name="parent").count() == 0  # nothing half-stored
    # The "mine" that replaced the cancelled one is what the name means (it answered
    # "the name of more than one workflow").
    again = child_workflow(using, owner=me, name="mine")
    parent = parent_workflow(using, "mine", owner=me)
    assert parent.nodes.get(name="child").subworkflow_id == again.pk

    # A chain deeper than WORKFLOW_MAX_DEPTH is refused at creation; no workflow can
    # name itself, since it must exist first.
    settings.SCHEDULER = {**settings.SCHEDULER, "WORKFLOW_MAX_DEPTH": 2}
    level = child_workflow(using, owner=me, name="level0")
    for i in (1, 2):
        level = services.create_workflow(f"level{i}", [{"name": "c", "workflow": level.pk}],
                                         owner=me)
    with pytest.raises(InvalidWorkflow) as bad:
        services.create_workflow("level3", [{"name": "c", "workflow": level.pk}], owner=me)
    assert "WORKFLOW_MAX_DEPTH (2)" in bad.value.errors["nodes[0].workflow"]

    # A map over a sub-workflow node: its result is never a list.
    child_workflow(using, owner=me, name="mine2")
    with pytest.raises(InvalidWorkflow) as bad:
        services.create_workflow("m", [{"name": "a", "workflow": "mine2"},
                                       {"name": "b", "handler": "noop", "map": "a"}],
                                 owner=me)
    assert "is a sub-workflow node" in bad.value.errors["nodes[1].map"]


def test_many_children_of_one_workflow_at_one_instant_all_start(pair):
    """Children of one workflow started at one instant each need a scheduled_at of their
    own (UNIQUE (workflow, scheduled_at)): 60 of them once exhausted the 50 instants
    tried 1 µs apart, and the start raised, a 500 for the tenant, a failed ack and a
    stalled reconcile for everyone."""
    using = pair.using
    child_workflow(using, queue="held")
    wide = services.create_workflow(
        "wide", [{"name": f"c{i}", "workflow": "child"} for i in range(60)], using=using)

    wr = services.start_workflow_run(wide, using=using)

    children = NodeRun.objects.using(using).filter(workflow_run=wr,
                                                   child_run_id__isnull=False)
    assert children.count() == 60
    assert WorkflowRun.objects.using(using).filter(
        pk__in=children.values("child_run_id")).values("scheduled_at").distinct().count() == 60


def test_nested_sub_workflows_run_to_the_end(pair):
    using = pair.using
    child_workflow(using)
    middle = services.create_workflow("middle", [
        {"name": "seed", "handler": "wf.sub.seed", "payload": {"n": 1}},
        {"name": "child", "workflow": "child"}], [["seed", "child"]], using=using)
    wr = services.start_workflow_run(parent_workflow(using, middle.pk), using=using)

    view = drain(pair, wr)

    assert view["state"] == "succeeded", view
    # report reads middle's leaf "child", whose result is the inner child's leaves.
    assert run_result(using, view, "report") == {"child": {"child": {"inc": {"inc": 3}}}}
    assert WorkflowRun.objects.using(using).count() == 3
    work(pair)


def test_over_rest_a_tenant_nests_only_its_own_workflows(pair, settings):
    if pair.using != "default":
        pytest.skip("the REST API serves the default database")
    api = client_for(User.objects.db_manager(pair.using).create_user("alice"))
    bob = User.objects.db_manager(pair.using).create_user("bob")
    bobs = child_workflow(pair.using, owner=bob, name="bobs")
    count = Workflow.objects.using(pair.using).count()
    for ref, why in [(bobs.pk, "names no workflow"), ("bobs", "names no workflow 'bobs'"),
                     ([1], "must be a workflow's id")]:
        response = api.post("/api/workflows/", {"name": "p", "nodes": [
            {"name": "c", "workflow": ref}]}, format="json")
        assert response.status_code == 400, response.content
        assert why in response.json()["nodes[0].workflow"][0], response.json()
    assert Workflow.objects.using(pair.using).count() == count  # nothing half-stored

    inner = api.post("/api/workflows/", {"name": "inner", "nodes": [
        {"name": "a", "handler": "echo", "payload": {"x": 1}}]}, format="json").json()
    outer = api.post("/api/workflows/", {"name": "outer", "nodes": [
        {"name": "c", "workflow": "inner"}]}, format="json")
    assert outer.status_code == 201, outer.content
    assert outer.json()["nodes"][0]["workflow"] == inner["id"]
    run = api.post(f"/api/workflows/{outer.json()['id']}/trigger/").json()

    view = drain(pair, WorkflowRun.objects.using(pair.using).get(pk=run["id"]))
    assert view["state"] == "succeeded", view
    shown = api.get(f"/api/workflow-runs/{run['id']}/").json()
    child = shown["nodes"][0]["child"]
    assert (shown["nodes"][0]["workflow"], child["state"], child["nodes"]) == (
        inner["id"], "succeeded", {"succeeded": 1})
    assert api.get(f"/api/workflow-runs/{child['id']}/").json()["parent"] == {
        "workflow_run": run["id"], "node": "c"}


def test_history_keeps_a_finished_child_and_its_runs_while_its_parent_runs(pair, settings):
    using = pair.using
    child_workflow(using)
    wr = services.start_workflow_run(parent_workflow(using, "child", report={
        "queue": "held"}), using=using)
    wait_until(lambda: work(pair) or child_of(using, wr).state == "succeeded", timeout=30,
               message="the child's end")
    child = child_of(using, wr)
    settings.SCHEDULER = {**settings.SCHEDULER, "HISTORY_RETENTION_S": 1}
    later = timezone.now() + timedelta(days=1)
    WorkflowRun.objects.using(using).filter(pk=child.pk).update(
        finished_at=timezone.now() - timedelta(days=2))

    assert prune(later, 100, using).runs == 0  # the parent's report still reads them
    assert prune_workflow_runs(using=using) == 0
    assert WorkflowRun.objects.using(using).filter(pk=child.pk).exists()
    control.cancel_workflow_run(wr, using=using)  # the parent over: the child may go
    assert prune(later, 100, using).runs >= 2
    assert prune_workflow_runs(using=using) == 1


def test_a_requeue_in_a_child_counts_its_parents_revived_nodes_against_max_pending(pair):
    using = pair.using
    owner = User.objects.db_manager(using).create(username="requeuer")
    policy = OwnerPolicy.objects.using(using).create(owner=owner, max_pending=20)
    child_workflow(using, owner=owner, double={"max_attempts": 1,
                                               "payload": {"fail_until": 1}})
    parent = services.create_workflow("parent", [
        {"name": "seed", "handler": "wf.sub.seed"}, {"name": "child", "workflow": "child"},
        *({"name": f"n{i}", "handler": "noop"} for i in range(6))],
        [["seed", "child"], *(["child", f"n{i}"] for i in range(6))], owner=owner,
        using=using)
    wr = services.start_workflow_run(parent, using=using)
    assert drain(pair, wr)["state"] == "failed"
    dead = NodeRun.objects.using(using).get(workflow_run=child_of(using, wr),
                                            node__name="double").run_id
    # The requeue revives the run, inc below it, and the parent's six nodes: 8 > 4.
    OwnerPolicy.objects.using(using).filter(pk=policy.pk).update(max_pending=4)

    with pytest.raises(QuotaExceeded) as caught:
        run_services.requeue([dead], using=using, strict=True)

    assert caught.value.limit == "max_pending"
    assert WorkflowRun.objects.using(using).get(pk=wr.pk).state == "failed"
    OwnerPolicy.objects.using(using).filter(pk=policy.pk).update(max_pending=8)
    assert run_services.requeue([dead], using=using, strict=True) == 1
    assert drain(pair, wr)["state"] == "succeeded"


def test_a_parent_started_for_later_holds_its_childs_runs_until_then(pair):
    using = pair.using
    child_workflow(using)
    wf = services.create_workflow("later", [{"name": "child", "workflow": "child"}],
                                  using=using)
    at = db_now(using) + timedelta(hours=1)

    wr = services.start_workflow_run(wf, scheduled_at=at, using=using)

    child = child_of(using, wr)
    assert child.scheduled_at == at
    root = NodeRun.objects.using(using).get(workflow_run=child, node__name="double")
    assert Run.objects.using(using).get(pk=root.run_id).run_at == at
