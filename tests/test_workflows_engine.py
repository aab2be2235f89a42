"""The workflow engine on every broker/database pair, with in-process Worker objects
forking real children (as tests/test_django_tasks.py): chain, fan-out, fan-in, diamond;
a failed node's descendants upstream_failed while the rest completes; a requeue from
the dead letter resumes; results read by node name; the result bound; cancel and pause
(docs/workflows.md)."""

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.models import Job
from jobs.registry import handler
from runs import services as run_services
from runs.models import Run
from runs.worker import Worker
from tests.conftest import wait_until
from workflows import control, services
from workflows.models import NodeRun, WorkflowRun

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


@handler("wf.collect")
def collect(ctx, payload):
    """Return this node's name with what each upstream returned (ctx.upstream)."""
    return {"me": payload["me"], "saw": {name: value for name, value in ctx.upstream.items()}}


@handler("wf.fail")
def fail(ctx, payload):
    raise ValueError("this node fails")


@handler("wf.fail_once")
def fail_once(ctx, payload):
    """Fails while the run has had fewer than ``attempts`` attempts, then succeeds."""
    if ctx.attempt < payload["attempts"]:
        raise ValueError(f"attempt {ctx.attempt} fails")
    return {"me": payload["me"]}


@handler("wf.big")
def big(ctx, payload):
    return {"blob": "x" * payload["bytes"]}


@pytest.fixture
def pair(broker, settings):
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name,
                          "RETRY_BACKOFF_BASE_S": 0.05}
    return broker


def node(name, handler_name="wf.collect", **fields):
    return {"name": name, "handler": handler_name, "payload": {"me": name}, **fields}


def work(broker) -> None:
    """One pass of a burst worker (and of a dispatcher's promotion)."""
    broker.promote()
    Worker(["default"], concurrency=2, using=broker.using, burst=True).serve()


def drain(broker, workflow_run, until=("succeeded", "failed", "cancelled")):
    """Run burst workers until the workflow run reaches one of ``until``."""
    def done():
        work(broker)
        return WorkflowRun.objects.using(broker.using).get(pk=workflow_run.pk).state in until

    try:
        wait_until(done, timeout=60, interval=0.05, message=f"workflow run to be {until}")
    except pytest.fail.Exception as exc:
        pytest.fail(f"{exc}; where it stands: {where(broker, workflow_run)}")
    return services.get_workflow_run(workflow_run.pk, using=broker.using)


def where(broker, workflow_run) -> dict:
    """A stuck workflow run's state, its node runs' and their runs' (state, attempt,
    worker, lease expiry) and what the broker holds: what a timeout reports."""
    node_runs = NodeRun.objects.using(broker.using).filter(workflow_run=workflow_run)
    run_ids = [r for r in node_runs.values_list("run_id", flat=True) if r]
    runs = {r[0]: r[1:] for r in Run.objects.using(broker.using).filter(pk__in=run_ids)
            .values_list("pk", "state", "attempt", "worker_id", "lease_expires_at")}
    return {"workflow_run": WorkflowRun.objects.using(broker.using)
            .get(pk=workflow_run.pk).state,
            "nodes": [(n.node.name, n.state, n.run_id, runs.get(n.run_id))
                      for n in node_runs.select_related("node")],
            "broker": [(d.queue, d.ready, d.delayed, d.leased) for d in broker.depth()]}


def states(view) -> dict[str, str]:
    return {n["name"]: n["state"] for n in view["nodes"]}


def results(broker, view) -> dict[str, object]:
    runs = dict(Run.objects.using(broker.using).filter(
        pk__in=[n["run_id"] for n in view["nodes"] if n["run_id"]]).values_list("pk", "result"))
    return {n["name"]: runs.get(n["run_id"]) for n in view["nodes"]}


def start(broker, nodes, edges):
    wf = services.create_workflow("wf", nodes, edges, using=broker.using)
    return services.start_workflow_run(wf, using=broker.using)


def one_run_per_node(broker, workflow_run) -> bool:
    node_runs = NodeRun.objects.using(broker.using).filter(workflow_run=workflow_run)
    jobs = list(node_runs.values_list("node__job_id", flat=True))
    per_job = Run.objects.using(broker.using).filter(job_id__in=jobs)
    return per_job.count() == len(jobs) == len({r for r in node_runs.values_list(
        "run_id", flat=True) if r})


def test_a_chain_runs_in_order_and_each_node_reads_the_one_before(pair):
    wr = start(pair, [node("a"), node("b"), node("c")], [["a", "b"], ["b", "c"]])

    view = drain(pair, wr)

    assert view["state"] == "succeeded"
    assert states(view) == {"a": "succeeded", "b": "succeeded", "c": "succeeded"}
    got = results(pair, view)
    assert got["a"] == {"me": "a", "saw": {}}
    assert got["b"] == {"me": "b", "saw": {"a": {"me": "a", "saw": {}}}}
    assert got["c"]["saw"] == {"b": got["b"]}
    by_name = {n["name"]: n for n in view["nodes"]}
    assert by_name["b"]["ready_at"] >= by_name["a"]["finished_at"]
    assert one_run_per_node(pair, wr)


def test_fan_out_fan_in_and_a_diamond(pair):
    wr = start(pair, [node(n) for n in ("root", "x", "y", "z", "join", "tail")],
               [["root", "x"], ["root", "y"], ["root", "z"], ["x", "join"], ["y", "join"],
                ["z", "join"], ["x", "tail"], ["join", "tail"]])

    view = drain(pair, wr)

    assert view["state"] == "succeeded"
    got = results(pair, view)
    assert set(got["join"]["saw"]) == {"x", "y", "z"}
    assert set(got["tail"]["saw"]) == {"x", "join"}
    assert one_run_per_node(pair, wr)


def test_a_dead_nodes_descendants_are_upstream_failed_and_the_rest_completes(pair):
    wr = start(pair, [node("a"), node("bad", "wf.fail", max_attempts=2), node("after_bad"),
                      node("deeper"), node("ok"), node("ok2")],
               [["a", "bad"], ["bad", "after_bad"], ["after_bad", "deeper"], ["a", "ok"],
                ["ok", "ok2"]])

    view = drain(pair, wr)

    assert view["state"] == "failed"
    assert states(view) == {"a": "succeeded", "bad": "failed", "after_bad": "upstream_failed",
                            "deeper": "upstream_failed", "ok": "succeeded", "ok2": "succeeded"}
    by_name = {n["name"]: n for n in view["nodes"]}
    assert by_name["deeper"]["error"] == "upstream 'bad' failed"
    assert by_name["deeper"]["run_id"] is None
    assert "'bad'" in view["error"] and "upstream_failed" in view["error"]
    assert Run.objects.using(pair.using).get(pk=by_name["bad"]["run_id"]).state == "dead"


def test_requeueing_the_dead_node_resumes_the_workflow_run(pair):
    wr = start(pair, [node("a"), node("flaky", "wf.fail_once", payload={"me": "flaky",
                                                                     "attempts": 3},
                                       max_attempts=2), node("b"), node("c")],
               [["a", "flaky"], ["flaky", "b"], ["b", "c"]])
    view = drain(pair, wr)
    assert (view["state"], states(view)["c"]) == ("failed", "upstream_failed")
    dead = {n["name"]: n for n in view["nodes"]}["flaky"]["run_id"]

    assert run_services.requeue([dead], using=pair.using) == 1
    resumed = services.get_workflow_run(wr.pk, using=pair.using)
    assert (resumed["state"], states(resumed)) == ("running", {
        "a": "succeeded", "flaky": "running", "b": "pending", "c": "pending"})
    view = drain(pair, wr)

    assert view["state"] == "succeeded" and view["error"] == ""
    assert set(states(view).values()) == {"succeeded"}
    assert results(pair, view)["b"]["saw"] == {"flaky": {"me": "flaky"}}
    assert one_run_per_node(pair, wr)


def test_a_result_over_the_bound_fails_the_node_with_a_clear_error(pair, settings):
    settings.SCHEDULER = {**settings.SCHEDULER, "WORKFLOW_MAX_RESULT_BYTES": 1000}
    wr = start(pair, [node("big", "wf.big", payload={"bytes": 2000}), node("next")],
               [["big", "next"]])

    view = drain(pair, wr)

    assert states(view) == {"big": "failed", "next": "upstream_failed"}
    run = Run.objects.using(pair.using).get(pk=view["nodes"][0]["run_id"])
    assert (run.state, run.attempt, run.result) == ("dead", 1, None)
    assert "WORKFLOW_MAX_RESULT_BYTES (1000)" in run.error


def test_cancel_stops_the_rest_and_pause_holds_new_nodes(pair):
    wr = start(pair, [node("a"), node("b")], [["a", "b"]])
    assert control.pause_workflow_run(wr, using=pair.using)

    def a_done():
        work(pair)
        return states(services.get_workflow_run(wr.pk, using=pair.using))["a"] == "succeeded"

    wait_until(a_done, timeout=30, message="a to finish while paused")
    view = services.get_workflow_run(wr.pk, using=pair.using)
    assert (view["state"], states(view)) == ("paused", {"a": "succeeded", "b": "pending"})
    assert view["nodes"][1]["run_id"] is None

    assert control.resume_workflow_run(wr, using=pair.using)
    assert drain(pair, wr)["state"] == "succeeded"

    second = services.start_workflow_run(wr.workflow_id, using=pair.using)
    assert control.cancel_workflow_run(second, using=pair.using)
    view = services.get_workflow_run(second.pk, using=pair.using)
    assert (view["state"], states(view)) == ("cancelled", {"a": "cancelled", "b": "cancelled"})
    assert Run.objects.using(pair.using).get(pk=view["nodes"][0]["run_id"]).state == "cancelled"
    assert not control.cancel_workflow_run(second, using=pair.using)


def test_django_tasks_nodes_run_and_read_their_upstreams(pair, settings):
    settings.TASKS = {"default": {"BACKEND": "scheduler_tasks.backend.SchedulerBackend",
                                  "QUEUES": [], "OPTIONS": {"DATABASE": pair.using}}}
    wr = start(pair, [{"name": "two", "task": "tests.djtasks_tasks.add", "args": [1, 1]},
                      {"name": "three", "task": "tests.djtasks_tasks.add", "kwargs": {"a": 1,
                                                                                   "b": 2}},
                      {"name": "total", "task": "tests.djtasks_tasks.sum_upstream",
                       "kwargs": {"extra": 10}}],
               [["two", "total"], ["three", "total"]])

    view = drain(pair, wr)

    assert view["state"] == "succeeded"
    assert results(pair, view) == {"two": 2, "three": 3, "total": 15}


def test_a_node_job_outlives_the_history_retention_of_its_runs(pair):
    from runs.history.retention import prune

    wr = start(pair, [node("a")], [])
    drain(pair, wr)
    job_id = NodeRun.objects.using(pair.using).get(workflow_run=wr).node.job_id

    pruned = prune(timezone.now() + timedelta(days=1), 100, pair.using)

    assert pruned.runs == 1 and pruned.jobs == 0
    assert Job.objects.using(pair.using).filter(pk=job_id).exists()
    again = services.start_workflow_run(wr.workflow_id, using=pair.using)
    assert drain(pair, again)["state"] == "succeeded"


def test_a_node_whose_job_was_cancelled_is_cancelled_instead_of_waiting(pair):
    wf = services.create_workflow("w", [node("a"), node("b"), node("c")],
                                  [["a", "b"], ["b", "c"]], using=pair.using)
    # The jobs' API refuses to cancel a node's job (tests/test_workflows_node_jobs.py); a
    # job cancelled before that rule, or in the database by hand, still must not hang.
    Job.objects.using(pair.using).filter(
        pk=wf.nodes.using(pair.using).get(name="b").job_id).update(status=Job.Status.CANCELLED)

    view = drain(pair, services.start_workflow_run(wf, using=pair.using))

    assert view["state"] == "failed"
    assert states(view) == {"a": "succeeded", "b": "cancelled", "c": "upstream_failed"}
    assert view["nodes"][1]["run_id"] is None
    assert view["nodes"][2]["error"] == "upstream 'b' cancelled"


def test_one_burst_worker_runs_a_whole_chain(pair, settings):
    # An idle worker waits WORKER_POLL_S before it leases again, and a burst worker stops
    # when it finds nothing to lease; one that acked a workflow node leases again at once,
    # since the ack may have made the next nodes' runs, also when a lease it sent before
    # the ack committed came back empty (it used to stop after the first node).
    settings.SCHEDULER = {**settings.SCHEDULER, "WORKER_POLL_S": 2}
    wr = start(pair, [node(n) for n in "abcde"],
               [["a", "b"], ["b", "c"], ["c", "d"], ["d", "e"]])
    pair.promote()

    Worker(["default"], concurrency=1, using=pair.using, burst=True).serve()

    assert states(services.get_workflow_run(wr.pk, using=pair.using)) == {
        n: "succeeded" for n in "abcde"}


def test_a_node_run_whose_lease_expired_is_retried_and_the_workflow_run_completes(pair):
    # The in-process half, on every pair, of test_workflows_daemons.py's SIGKILLed worker
    # (which runs real daemons on one pair): a node's run leased by a worker that never
    # heartbeats is reaped, retried, and the workflow run completes with one run a node.
    wr = start(pair, [node("a"), node("b")], [["a", "b"]])
    pair.promote()
    [lost] = pair.lease(["default"], 1, "w:0:lost", ttl_s=0.2)
    time.sleep(0.4)
    assert pair.reap() == 1

    view = drain(pair, wr)

    assert view["state"] == "succeeded"
    assert one_run_per_node(pair, wr)
    outcomes = list(Run.objects.using(pair.using).get(pk=lost.run_id).attempts
                    .order_by("number").values_list("outcome", flat=True))
    assert outcomes == ["lease_expired", "succeeded"]


@handler("wf.misread")
def misread(ctx, payload):
    """Reads an upstream by a name that is not one of its upstreams."""
    return ctx.upstream["extract"]


def test_an_upstream_read_by_a_wrong_name_says_which_names_there_are(pair):
    broker = pair
    workflow = services.create_workflow(
        "misread", [node("a"), node("b", "wf.misread", max_attempts=1)], [("a", "b")],
        using=broker.using)
    view = drain(broker, services.start_workflow_run(workflow, using=broker.using),
                 until=("failed",))

    b = next(n for n in view["nodes"] if n["name"] == "b")
    error = Run.objects.using(broker.using).get(pk=b["run_id"]).error
    assert "'extract' is not an upstream node of this node; its upstream nodes: a" in error


def test_a_node_not_started_yet_shows_its_jobs_max_attempts(pair):
    broker = pair
    workflow = services.create_workflow(
        "pending", [node("a"), node("b", max_attempts=7)], [("a", "b")], using=broker.using)
    workflow_run = services.start_workflow_run(workflow, using=broker.using)

    view = services.get_workflow_run(workflow_run.pk, using=broker.using)
    b = next(n for n in view["nodes"] if n["name"] == "b")
    assert (b["state"], b["run_id"], b["max_attempts"]) == ("pending", None, 7)
