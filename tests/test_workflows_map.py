"""Mapped nodes on every broker/database pair, with real workers (docs/workflows.md,
"Mapped nodes"): one run per item of the upstream's list, the join reads the items'
results in item order, an empty list, the owner's max_map_items refusing a long list
with nothing made, a failing item failing the node by the join's trigger rule, a
repeated fan-out making nothing twice, cancel cancelling the items' runs, and the
definition's checks."""

import pytest
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction

from jobs.models import OwnerPolicy
from jobs.registry import handler
from runs import services as run_services
from runs.clock import db_now
from runs.models import Run
from runs.worker import Worker
from tests.conftest import wait_until
from tests.test_workflows_engine import drain, states, work
from workflows import control, reconcile, services
from workflows.execution import ack, engine
from workflows.execution.quota import revived_by_requeue
from workflows.models import MapItem, NodeRun, WorkflowNode
from workflows.validation import InvalidWorkflow, validate_workflow

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


@pytest.fixture
def pair(broker, settings):
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name,
                          "RETRY_BACKOFF_BASE_S": 0.05}
    return broker


@handler("wf.list")
def make_list(ctx, payload):
    return payload["items"]


@handler("wf.square")
def square(ctx, payload):
    """One item: its index and square; fails on the item ``fail_on``."""
    item = ctx.map_item
    if item["item"] == payload.get("fail_on") and ctx.attempt <= payload.get("until", 99):
        raise ValueError(f"item {item['item']} fails")
    return {"i": item["index"], "sq": item["item"] ** 2, "root": ctx.upstream["root"]}


@handler("wf.join")
def join(ctx, payload):
    return {"got": ctx.upstream["each"], "map_item": ctx.map_item}


def graph(items, owner=None, using="default", each=None, join_fields=None):
    """root (returns ``items``) -> each (mapped over root) -> join."""
    wf = services.create_workflow("mapped", [
        {"name": "root", "handler": "wf.list", "payload": {"items": items}},
        {"name": "each", "handler": "wf.square", "map": "root", **(each or {})},
        {"name": "join", "handler": "wf.join", **(join_fields or {})}],
        [["each", "join"]], owner=owner, using=using)
    return services.start_workflow_run(wf, using=using)


def result_of(broker, view, name):
    run_id = {n["name"]: n["run_id"] for n in view["nodes"]}[name]
    return Run.objects.using(broker.using).get(pk=run_id).result


def each_runs(broker, wr) -> list[Run]:
    job = WorkflowNode.objects.using(broker.using).get(workflow_id=wr.workflow_id,
                                                       name="each").job_id
    return list(Run.objects.using(broker.using).filter(job_id=job))


def test_a_map_runs_once_per_item_and_the_join_reads_them_in_item_order(pair):
    items = [7, 3, 9, 1, 4, 8]
    wr = graph(items, using=pair.using)

    view = drain(pair, wr)

    assert view["state"] == "succeeded", view
    assert states(view) == {"root": "succeeded", "each": "succeeded", "join": "succeeded"}
    got = result_of(pair, view, "join")
    assert [g["sq"] for g in got["got"]] == [x * x for x in items]
    assert [g["i"] for g in got["got"]] == list(range(len(items)))
    assert got["got"][0]["root"] == items  # an item run reads its node's upstreams too
    assert got["map_item"] is None
    assert {n["name"]: n["items"] for n in view["nodes"]}["each"] \
        == {"total": len(items), "succeeded": len(items)}
    runs = each_runs(pair, wr)
    assert len(runs) == len(items) and {r.state for r in runs} == {"succeeded"}
    assert sorted(MapItem.objects.using(pair.using).values_list("index", flat=True)) \
        == list(range(len(items)))


def test_an_empty_list_succeeds_the_mapped_node_with_no_run(pair):
    wr = graph([], using=pair.using)

    view = drain(pair, wr)

    assert (view["state"], states(view)["each"]) == ("succeeded", "succeeded")
    assert result_of(pair, view, "join")["got"] == []
    assert each_runs(pair, wr) == []


def test_the_owners_max_map_items_refuses_a_longer_list_and_nothing_is_made(pair):
    owner = User.objects.db_manager(pair.using).create(username="mapper")
    OwnerPolicy.objects.using(pair.using).create(owner=owner, max_map_items=3)
    wr = graph([1, 2, 3, 4], owner=owner, using=pair.using)

    view = drain(pair, wr)

    assert view["state"] == "failed"
    assert states(view) == {"root": "succeeded", "each": "failed", "join": "upstream_failed"}
    error = {n["name"]: n["error"] for n in view["nodes"]}["each"]
    assert "4 items" in error and "max_map_items (3)" in error, error
    assert each_runs(pair, wr) == []
    assert not MapItem.objects.using(pair.using).exists()


def test_a_failing_item_fails_the_mapped_node_by_its_downstreams_rules(pair):
    wr = graph([1, 2, 3], using=pair.using, each={"payload": {"fail_on": 2},
                                                  "max_attempts": 1})
    view = drain(pair, wr)
    assert view["state"] == "failed"
    assert states(view) == {"root": "succeeded", "each": "failed", "join": "upstream_failed"}
    error = {n["name"]: n["error"] for n in view["nodes"]}["each"]
    assert "1 of 3 items did not succeed; item 1" in error and "item 2 fails" in error
    assert sorted(r.state for r in each_runs(pair, wr)) == ["dead", "succeeded", "succeeded"]

    # all_done: the join runs after the failure and reads None for the failed item.
    wr = graph([1, 2, 3], using=pair.using, each={"payload": {"fail_on": 2},
                                                  "max_attempts": 1},
               join_fields={"trigger_rule": "all_done"})
    view = drain(pair, wr)
    assert (view["state"], states(view)["join"]) == ("failed", "succeeded")
    got = result_of(pair, view, "join")["got"]
    assert got[1] is None and [g["sq"] for g in (got[0], got[2])] == [1, 9]


def fan_out_only(broker, wr, held):
    """Run the root and hold the items in queue ``held`` until the fan-out made them."""
    def fanned():
        work(broker)
        return MapItem.objects.using(broker.using).exists()

    wait_until(fanned, timeout=30, message="the fan-out")


def drain_all(broker, wr, held):
    """Run the held queue's items and the rest to the end."""
    broker.promote()
    Worker(["default", held], concurrency=2, using=broker.using, burst=True).serve()
    return drain(broker, wr)


def test_requeueing_a_dead_item_resumes_the_mapped_node_and_the_join(pair):
    wr = graph([1, 2, 3], using=pair.using, each={"payload": {"fail_on": 3, "until": 1},
                                                  "max_attempts": 1})
    view = drain(pair, wr)
    assert states(view) == {"root": "succeeded", "each": "failed", "join": "upstream_failed"}
    dead = [r.pk for r in each_runs(pair, wr) if r.state == "dead"]
    # max_pending counts what the requeue makes pending again: the join.
    assert revived_by_requeue(dead, pair.using) == {dead[0]: 1}

    assert run_services.requeue(dead, using=pair.using) == 1
    resumed = services.get_workflow_run(wr.pk, using=pair.using)
    assert (resumed["state"], states(resumed)) == ("running", {
        "root": "succeeded", "each": "running", "join": "pending"})
    view = drain(pair, wr)

    assert view["state"] == "succeeded"
    assert [g["sq"] for g in result_of(pair, view, "join")["got"]] == [1, 4, 9]
    assert len(each_runs(pair, wr)) == 3


def test_a_repeated_fan_out_makes_no_run_twice(pair):
    wr = graph([5, 6, 7], using=pair.using, each={"queue": "held"})
    fan_out_only(pair, wr, "held")
    mapped = NodeRun.objects.using(pair.using).get(workflow_run=wr, node__name="each")
    root_run = NodeRun.objects.using(pair.using).get(workflow_run=wr, node__name="root").run_id
    # The ack's engine path again (a retried ack), a reconcile's start, and a fan-out of
    # the same node run made pending again by hand: the unique keys refuse its items.
    with transaction.atomic(using=pair.using):
        now = db_now(pair.using)
        ack.nodes_succeeded([root_run], now, pair.using)
        assert engine.start_ready({wr.pk}, now, pair.using) == []
        NodeRun.objects.using(pair.using).filter(pk=mapped.pk).update(state="pending")
        with pytest.raises(IntegrityError), transaction.atomic(using=pair.using):
            engine.start_ready({wr.pk}, now, pair.using, node_ids=[mapped.node_id])
        NodeRun.objects.using(pair.using).filter(pk=mapped.pk).update(state="running")

    view = drain_all(pair, wr, "held")

    assert view["state"] == "succeeded"
    assert len(each_runs(pair, wr)) == 3
    assert MapItem.objects.using(pair.using).count() == 3
    assert [g["sq"] for g in result_of(pair, view, "join")["got"]] == [25, 36, 49]


def test_cancel_cancels_the_items_runs(pair):
    wr = graph(list(range(5)), using=pair.using, each={"queue": "held"})
    fan_out_only(pair, wr, "held")

    assert control.cancel_workflow_run(wr, using=pair.using)

    view = services.get_workflow_run(wr.pk, using=pair.using)
    assert view["state"] == "cancelled"
    assert states(view) == {"root": "succeeded", "each": "cancelled", "join": "cancelled"}
    assert {r.state for r in each_runs(pair, wr)} == {"cancelled"}
    assert set(MapItem.objects.using(pair.using).values_list("state", flat=True)) \
        == {"cancelled"}


def test_the_definition_of_a_mapped_node_is_checked():
    base = [{"name": "root", "handler": "noop"}]
    with pytest.raises(InvalidWorkflow) as bad:
        validate_workflow("w", [*base, {"name": "m", "handler": "noop", "map": "nope"}], [])
    assert "names no node called 'nope'" in bad.value.errors["nodes[1].map"]
    with pytest.raises(InvalidWorkflow) as bad:
        validate_workflow("w", [*base, {"name": "m", "handler": "noop", "map": "root",
                                        "trigger_rule": "all_done"}], [])
    assert "only all_success" in bad.value.errors["nodes[1].trigger_rule"]
    with pytest.raises(InvalidWorkflow) as bad:
        validate_workflow("w", [*base, {"name": "m", "handler": "noop", "map": "root"},
                                {"name": "mm", "handler": "noop", "map": "m"}], [])
    assert "map over a map" in bad.value.errors["nodes[2].map"]
    clean = validate_workflow("w", [*base, {"name": "m", "handler": "noop", "map": "root"}],
                              [])
    assert clean["edges"] == [("root", "m")]  # the edge is implied
    assert [n["map"] for n in clean["nodes"]] == [None, "root"]


def test_the_reconcile_takes_an_items_outcome_its_ack_did_not_tell(pair):
    wr = graph([2, 3], using=pair.using, each={"queue": "held"})
    fan_out_only(pair, wr, "held")
    for run in each_runs(pair, wr):  # ended without the listener, as if its work was lost
        index = MapItem.objects.using(pair.using).get(run_id=run.pk).index
        Run.objects.using(pair.using).filter(pk=run.pk).update(
            state="succeeded", result={"i": index, "sq": -index})

    reconcile.reconcile(using=pair.using)

    view = services.get_workflow_run(wr.pk, using=pair.using)
    assert states(view) == {"root": "succeeded", "each": "succeeded", "join": "running"}
    view = drain(pair, wr)
    assert [g["sq"] for g in result_of(pair, view, "join")["got"]] == [0, -1]
