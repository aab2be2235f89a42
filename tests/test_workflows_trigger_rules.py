"""Trigger rules (docs/workflows.md, "Trigger rules"; workflows/execution/rules.py) on every
broker/database pair: each rule's run and its marks, with burst workers running real
children; ``one_success`` and ``one_failed`` starting while other upstreams still run
(leases held by the test, as a worker holds them); a requeue of the failure that
decided a mark; the ways in refusing an unknown rule (REST's 400 is in
tests/test_workflows_api.py) and showing a rule (REST; the admin's graph is in
tests/test_workflows_admin.py); and
``verdict`` held equal to the data the three readiness reads are made from."""

import itertools

import pytest

from jobs.models import Job
from jobs.registry import handler
from runs import services as run_services
from runs.models import AttemptOutcome, Run
from runs.types import Outcome
from tests.test_workflows_engine import drain, node, states, work
from workflows import services
from workflows.execution import rules
from workflows.models import NodeRun, NodeState, WorkflowRun
from workflows.validation import InvalidWorkflow

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


@handler("wf.rule_ok")
def ok(ctx, payload):
    return {"me": payload.get("me"), "saw": sorted(ctx.upstream)}


@handler("wf.rule_fail")
def fail(ctx, payload):
    raise ValueError("this node fails")


@pytest.fixture
def pair(broker, settings):
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name,
                          "RETRY_BACKOFF_BASE_S": 0.05}
    return broker


def ruled(name, rule=None, handler_name="wf.rule_ok", **fields):
    spec = node(name, handler_name, max_attempts=1, **fields)
    return spec if rule is None else {**spec, "trigger_rule": rule}


def start(broker, nodes, edges):
    wf = services.create_workflow("rules", nodes, edges, using=broker.using)
    return services.start_workflow_run(wf, using=broker.using)


def test_after_a_failure_each_rule_runs_or_is_marked_as_airflow_does(pair):
    wr = start(pair, [
        ruled("bad", handler_name="wf.rule_fail"), ruled("good"),
        ruled("cleanup", "all_done"), ruled("either", "one_success"),
        ruled("strict"), ruled("alarm", "one_failed"), ruled("on_fail", "all_failed"),
        ruled("tolerant", "none_failed"), ruled("after_strict", "all_done"),
        ruled("below_strict"), ruled("good_only", "none_failed")],
        [["bad", "cleanup"], ["good", "cleanup"], ["bad", "either"], ["good", "either"],
         ["bad", "strict"], ["good", "strict"], ["bad", "alarm"], ["good", "alarm"],
         ["bad", "on_fail"], ["bad", "tolerant"], ["good", "tolerant"],
         ["strict", "after_strict"], ["strict", "below_strict"], ["good", "good_only"]])

    view = drain(pair, wr)

    assert states(view) == {
        "bad": "failed", "good": "succeeded", "cleanup": "succeeded", "either": "succeeded",
        "strict": "upstream_failed", "alarm": "succeeded", "on_fail": "succeeded",
        "tolerant": "upstream_failed", "after_strict": "succeeded",
        "below_strict": "upstream_failed", "good_only": "succeeded"}
    errors = {n["name"]: n["error"] for n in view["nodes"]}
    assert errors["strict"] == "upstream 'bad' failed"
    assert errors["below_strict"] == "upstream 'bad' failed"
    assert errors["tolerant"] == "upstream 'bad' failed, so none_failed can no longer hold"
    # A failure stays the workflow run's outcome, whatever ran after it.
    assert view["state"] == "failed"
    assert "'bad'" in view["error"] and "'cleanup'" not in view["error"]
    by_name = {n["name"]: n for n in view["nodes"]}
    assert by_name["cleanup"]["trigger_rule"] == "all_done"
    assert by_name["strict"]["trigger_rule"] == "all_success"


def test_when_all_succeed_the_failure_paths_are_skipped_and_the_run_succeeds(pair):
    wr = start(pair, [
        ruled("a"), ruled("b"), ruled("alarm", "one_failed"), ruled("on_fail", "all_failed"),
        ruled("after_alarm"), ruled("either_alarm", "one_success"),
        ruled("tolerant", "none_failed"), ruled("cleanup", "all_done")],
        [["a", "alarm"], ["b", "alarm"], ["a", "on_fail"], ["b", "on_fail"],
         ["alarm", "after_alarm"], ["alarm", "either_alarm"], ["on_fail", "either_alarm"],
         ["alarm", "tolerant"], ["b", "tolerant"], ["on_fail", "cleanup"]])

    view = drain(pair, wr)

    assert states(view) == {
        "a": "succeeded", "b": "succeeded", "alarm": "skipped", "on_fail": "skipped",
        "after_alarm": "skipped", "either_alarm": "skipped", "tolerant": "succeeded",
        "cleanup": "succeeded"}
    errors = {n["name"]: n["error"] for n in view["nodes"]}
    assert errors["alarm"] == "no upstream failed, so one_failed can no longer hold"
    assert errors["after_alarm"] == "upstream 'alarm' was skipped"
    assert errors["either_alarm"] == ("every upstream was skipped, so one_success can no "
                                      "longer hold")
    # A skipped node is no failure.
    assert view["state"] == "succeeded" and view["error"] == ""


def lease_all(broker, count: int) -> dict[str, object]:
    """Lease ``count`` ready runs as worker w0; returns them by node name."""
    broker.promote()
    leases = broker.lease(["default"], count, "w0")
    names = dict(NodeRun.objects.using(broker.using).filter(
        run_id__in=[lease.run_id for lease in leases]).values_list("run_id", "node__name"))
    return {names[lease.run_id]: lease for lease in leases}


def node_state(broker, wr, name: str) -> str:
    return NodeRun.objects.using(broker.using).get(workflow_run=wr, node__name=name).state


@pytest.mark.parametrize("rule, outcome", [("one_success", AttemptOutcome.SUCCEEDED),
                                           ("one_failed", AttemptOutcome.FAILED)])
def test_one_success_and_one_failed_start_without_waiting_for_the_rest(pair, rule, outcome):
    wr = start(pair, [ruled("first"), ruled("slow"), ruled("next", rule),
                      ruled("strict")],
               [["first", "next"], ["slow", "next"], ["first", "strict"],
                ["slow", "strict"]])
    held = lease_all(pair, 2)
    assert set(held) == {"first", "slow"}

    pair.complete([Outcome(held["first"], outcome, result=None, error="boom")])

    # "slow" is still running: "next" has its run, "strict" waits (or is marked).
    assert node_state(pair, wr, "slow") == "running"
    assert node_state(pair, wr, "next") == "running"
    assert node_state(pair, wr, "strict") == (
        "pending" if outcome == AttemptOutcome.SUCCEEDED else "upstream_failed")
    pair.complete([Outcome(held["slow"], AttemptOutcome.SUCCEEDED, result=None)])
    view = drain(pair, wr)
    assert states(view)["next"] == "succeeded"
    nxt = Run.objects.using(pair.using).get(pk=NodeRun.objects.using(pair.using).get(
        workflow_run=wr, node__name="next").run_id)
    assert nxt.result["saw"] == ["first", "slow"]  # both done by the time it ran
    assert view["state"] == ("succeeded" if outcome == AttemptOutcome.SUCCEEDED else "failed")


def test_a_requeue_brings_back_what_the_failure_marked_and_keeps_what_ran(pair):
    wr = start(pair, [ruled("bad", handler_name="wf.rule_fail"),
                      ruled("cleanup", "all_done"), ruled("strict")],
               [["bad", "cleanup"], ["bad", "strict"]])
    view = drain(pair, wr)
    assert states(view) == {"bad": "failed", "cleanup": "succeeded",
                            "strict": "upstream_failed"}
    bad = NodeRun.objects.using(pair.using).get(workflow_run=wr, node__name="bad")
    Job.objects.using(pair.using).filter(pk=bad.node.job_id).update(handler="wf.rule_ok")

    assert run_services.requeue([bad.run_id], using=pair.using) == 1
    assert node_state(pair, wr, "strict") == "pending"
    view = drain(pair, wr)

    assert states(view) == {"bad": "succeeded", "cleanup": "succeeded", "strict": "succeeded"}
    assert view["state"] == "succeeded"


def test_a_node_without_upstreams_runs_whatever_its_rule(pair):
    wr = start(pair, [ruled("alone", "one_failed"), ruled("too", "one_success")], [])
    work(pair)
    view = drain(pair, wr)
    assert states(view) == {"alone": "succeeded", "too": "succeeded"}


def test_an_unknown_rule_is_refused_naming_the_field_and_the_rules(pair):
    with pytest.raises(InvalidWorkflow) as caught:
        services.create_workflow("bad rule", [ruled("a"), ruled("b", "one_sucess")],
                                 [["a", "b"]], using=pair.using)
    reason = caught.value.errors["nodes[1].trigger_rule"]
    assert "'one_sucess'" in reason and all(rule in reason for rule in rules.RULES)
    for wrong in (5, "", ["all_done"]):
        with pytest.raises(InvalidWorkflow) as caught:
            services.create_workflow("bad rule", [ruled("a", wrong)], using=pair.using)
        assert "nodes[0].trigger_rule" in caught.value.errors
    assert not WorkflowRun.objects.using(pair.using).exists()


STATES = list(NodeState.values)
STATES.remove(NodeState.PENDING)  # a pending upstream is live as a running one is
STATES.append(NodeState.PENDING)


def test_the_verdict_and_the_readiness_data_agree_on_every_small_case():
    # ALL_OF and ANY_OF make the ORM's, ready_pg's and (by hand) the one-call ack's
    # readiness reads; verdict decides the marks. Every multiset of up to 3 upstream states.
    for rule in rules.RULES:
        for size in range(1, 4):
            for case in itertools.combinations_with_replacement(STATES, size):
                said = rules.verdict(rule, list(case))
                if rule in rules.ALL_OF:
                    ready = all(s in rules.ALL_OF[rule] for s in case)
                else:
                    ready = any(s in rules.ANY_OF[rule] for s in case)
                assert (said == rules.READY) == ready, (rule, case, said)
                live = any(s in rules.LIVE for s in case)
                dead = (NodeState.UPSTREAM_FAILED, NodeState.SKIPPED)
                if said in dead:
                    # Dead stays dead whatever the live upstreams do next (all_success
                    # below a skip is skipped at once, as Airflow's is).
                    for ending in itertools.product(rules.DONE, repeat=size):
                        final = [e if s in rules.LIVE else s
                                 for s, e in zip(case, ending, strict=True)]
                        assert rules.verdict(rule, final) in dead, (rule, case, final)
                elif said is None:
                    assert live, (rule, case)


@pytest.mark.django_db(transaction=False)
def test_rest_takes_and_shows_each_nodes_rule(api):
    body = {"name": "with a clean-up", "nodes": [
        {"name": "a", "handler": "noop"}, {"name": "tidy", "handler": "noop",
                                           "trigger_rule": "all_done"}],
        "edges": [["a", "tidy"]]}

    made = api.post("/api/workflows/", body, format="json")

    assert made.status_code == 201, made.content
    shown = {n["name"]: n["trigger_rule"] for n in made.json()["nodes"]}
    assert shown == {"a": "all_success", "tidy": "all_done"}
    run = api.post(f"/api/workflows/{made.json()['id']}/trigger/", format="json").json()
    assert {n["name"]: n["trigger_rule"] for n in run["nodes"]} == shown


def test_the_reconcile_marks_and_starts_by_the_rules_what_no_listener_told(pair):
    # A node's run dead without its listener told (a run changed by hand): the reconcile
    # fails the node, marks the all_success node below it, starts the all_done one.
    from workflows.reconcile import reconcile

    wr = start(pair, [ruled("bad"), ruled("strict"), ruled("tidy", "all_done")],
               [["bad", "strict"], ["bad", "tidy"]])
    bad = NodeRun.objects.using(pair.using).get(workflow_run=wr, node__name="bad")
    Run.objects.using(pair.using).filter(pk=bad.run_id).update(state="dead", error="gone")

    counts = reconcile(using=pair.using)

    assert counts["finished"] == 1, counts  # tidy starts inside the failure's settle
    assert node_state(pair, wr, "bad") == "failed"
    assert node_state(pair, wr, "strict") == "upstream_failed"
    assert node_state(pair, wr, "tidy") == "running"


def test_the_reconcile_skips_what_a_success_no_listener_told_of_rules_out(pair):
    from workflows.reconcile import reconcile

    wr = start(pair, [ruled("a"), ruled("alarm", "one_failed"), ruled("tidy", "all_done")],
               [["a", "alarm"], ["alarm", "tidy"]])
    first = NodeRun.objects.using(pair.using).get(workflow_run=wr, node__name="a")
    Run.objects.using(pair.using).filter(pk=first.run_id).update(state="succeeded")

    reconcile(using=pair.using)

    assert node_state(pair, wr, "alarm") == "skipped"
    assert node_state(pair, wr, "tidy") == "running"


def test_the_one_call_leaves_a_one_failed_node_to_the_engine_only_once_it_may_fail(
        pair, monkeypatch):
    # While an upstream can still fail, a one_failed node below an acked success waits
    # and the one call serves the ack; the last success rules it out: the engine marks.
    from workflows.execution import ack_pg

    if pair.using != "default":
        pytest.skip("the one-call ack is PostgreSQL's")
    served = []
    one_call = ack_pg.ack_successes
    monkeypatch.setattr(ack_pg, "ack_successes", lambda outcomes, using: served.append(
        one_call(outcomes, using)) or served[-1])
    wr = start(pair, [ruled("a"), ruled("b"), ruled("alarm", "one_failed")],
               [["a", "alarm"], ["b", "alarm"]])
    held = lease_all(pair, 2)

    pair.complete([Outcome(held["a"], AttemptOutcome.SUCCEEDED)])
    assert served[-1] is not None and node_state(pair, wr, "alarm") == "pending"
    pair.complete([Outcome(held["b"], AttemptOutcome.SUCCEEDED)])

    assert served[-1] is None  # left to the engine
    assert node_state(pair, wr, "alarm") == "skipped"
    assert WorkflowRun.objects.using(pair.using).get(pk=wr.pk).state == "succeeded"
