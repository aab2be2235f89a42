"""A workflow definition is validated as a whole: a cycle is refused naming its nodes,
unknown names, duplicates, self-edges and oversize graphs are refused naming the field,
and nothing is half-stored (docs/workflows.md, "Validation")."""

from datetime import UTC, datetime

import pytest

from jobs.models import Job, Schedule
from runs.tenancy.quotas import QuotaExceeded
from scheduler_core.exceptions import InvalidJob
from workflows import services
from workflows.models import Workflow, WorkflowEdge, WorkflowNode, WorkflowRun
from workflows.validation import InvalidWorkflow

pytestmark = pytest.mark.django_db


def node(name, **fields):
    return {"name": name, "handler": "noop", **fields}


def nothing_stored():
    return (Workflow.objects.count(), WorkflowNode.objects.count(), WorkflowEdge.objects.count(),
            Job.objects.count(), Schedule.objects.count()) == (0, 0, 0, 0, 0)


def refused(nodes, edges=(), **options) -> dict:
    with pytest.raises(InvalidWorkflow) as caught:
        services.create_workflow(options.pop("name", "etl"), nodes, list(edges), **options)
    assert nothing_stored()
    return caught.value.errors


def test_a_cycle_is_refused_naming_the_nodes_on_it():
    errors = refused([node("a"), node("b"), node("c"), node("d")],
                     [["a", "b"], ["b", "c"], ["c", "a"], ["c", "d"]])

    assert list(errors) == ["edges"]
    assert "cycle" in errors["edges"]
    cycle = errors["edges"].split(": ", 1)[1].split(";")[0].split(" -> ")
    assert cycle[0] == cycle[-1] and set(cycle) == {"a", "b", "c"}
    # In the edges' direction: each node on it waits for the one before.
    steps = set(zip(cycle, cycle[1:], strict=False))
    assert steps == {("a", "b"), ("b", "c"), ("c", "a")}


def test_a_cycle_is_named_with_the_other_problems_not_after_they_are_fixed():
    errors = refused([node("a"), node("b"), node("a"), node("c", handler="no.such.handler")],
                     [["a", "b"], ["b", "a"], ["b", "b"], ["a", "zz"]])

    assert "already the name" in errors["nodes[2].name"]
    assert "no handler" in errors["nodes[3].handler"]
    assert "self-edge" in errors["edges[2]"] and "'zz'" in errors["edges[3]"]
    assert "cycle: " in errors["edges"] and set(
        errors["edges"].split(": ", 1)[1].split(";")[0].split(" -> ")) == {"a", "b"}


def test_a_node_given_max_retries_is_pointed_at_max_attempts():
    errors = refused([node("a", max_retries=2)])

    assert "did you mean 'max_attempts'?" in errors["nodes[0].max_retries"]


@pytest.mark.parametrize("nodes, edges, field, words", [
    ([node("a"), node("a")], [], "nodes[1].name", "already the name of nodes[0]"),
    ([node("a")], [["a", "zz"]], "edges[0]", "'zz'"),
    ([node("a")], [["a", "a"]], "edges[0]", "self-edge"),
    ([node("a"), node("b")], [["a", "b"], {"from": "a", "to": "b"}], "edges[1]", "repeats"),
    ([node("a"), node("b")], [["a"]], "edges[0]", "[upstream, downstream]"),
    ([node("a"), node("b")], [{"from": "a"}], "edges[0]", "[upstream, downstream]"),
    ([node("")], [], "nodes[0].name", "non-empty"),
    ([node("x" * 201)], [], "nodes[0].name", "200"),
    ([{"name": "a"}], [], "nodes[0].handler", "exactly one of handler"),
    ([{"name": "a", "handler": "noop", "task": "tests.djtasks_tasks.add"}], [],
     "nodes[0].handler", "exactly one"),
    ([node("a", handler="no.such.handler")], [], "nodes[0].handler", "no handler"),
    ([node("a", priority=12)], [], "nodes[0].priority", "between 0 and 9"),
    ([node("a", timeout_s=0)], [], "nodes[0].timeout_s", "between 1"),
    ([node("a", payload=[1])], [], "nodes[0].payload", "JSON object"),
    ([node("a", colour="red")], [], "nodes[0].colour", "not a node field"),
    ([{"name": "a", "task": "tests.no_such_module.task"}], [], "nodes[0].task",
     "could not run"),
    ([node("a", args=[1])], [], "nodes[0].args", "only a task node"),
    (["a"], [], "nodes[0]", "must be an object"),
    ([], [], "nodes", "non-empty"),
])
def test_a_bad_definition_is_refused_naming_the_field(nodes, edges, field, words):
    errors = refused(nodes, edges)

    assert field in errors, errors
    assert words in errors[field]


def test_every_problem_is_named_at_once():
    errors = refused([node("a"), node("a", priority=99), node("b", queue="bad queue")],
                     [["a", "nobody"], ["b", "b"]], name="")

    assert {"name", "nodes[1].name", "nodes[2].queue", "edges[0]", "edges[1]"} <= set(errors)


def test_more_nodes_or_edges_than_the_bounds_are_refused(settings):
    settings.SCHEDULER = {**settings.SCHEDULER, "WORKFLOW_MAX_NODES": 3,
                          "WORKFLOW_MAX_EDGES": 2}

    errors = refused([node(str(i)) for i in range(4)])
    assert "WORKFLOW_MAX_NODES" in errors["nodes"] and "(3" in errors["nodes"]
    errors = refused([node("a"), node("b"), node("c")], [["a", "b"], ["b", "c"], ["a", "c"]])
    assert "WORKFLOW_MAX_EDGES" in errors["edges"]


@pytest.mark.parametrize("schedule, field", [
    ("not cron", "schedule"),
    ({"cron": "* * * * *", "timezone": "Mars/Base"}, "schedule.timezone"),
    ({"cron": "* * * * *", "misfire_policy": "sometimes"}, "schedule.misfire_policy"),
    ({"cron": "* * * * *", "jitter_s": -1}, "schedule.jitter_s"),
    ({"cron": "* * * * *", "max_lag_s": "1h"}, "schedule.max_lag_s"),
    ({"cron": "* * * * *", "every": 5}, "schedule"),
    ({"timezone": "UTC"}, "schedule"),
])
def test_a_bad_schedule_is_refused(schedule, field):
    errors = refused([node("a")], schedule=schedule)

    assert field in errors, errors


def test_an_owners_bounds_apply_to_every_node(alice, settings):
    settings.SCHEDULER = {**settings.SCHEDULER, "OWNER_MAX_JOBS": 2}

    errors = refused([node("a", queue="private"), node("b", priority=0)], owner=alice)
    assert {"nodes[0].queue", "nodes[1].priority"} <= set(errors)
    with pytest.raises(QuotaExceeded, match="max_jobs"):
        services.create_workflow("etl", [node("a"), node("b"), node("c")], owner=alice)
    assert nothing_stored()


def test_a_valid_workflow_is_stored_with_a_job_per_node():
    wf = services.create_workflow(
        "etl",
        [node("extract", payload={"n": 1}, queue="etl", priority=3, timeout_s=30,
              max_attempts=2),
         {"name": "load", "task": "tests.djtasks_tasks.add", "args": [1], "kwargs": {"b": 2}},
         node("report")],
        [["extract", "load"], {"from": "load", "to": "report"}],
        schedule={"cron": "0 3 * * *", "timezone": "Europe/Berlin", "jitter_s": 30})

    got = services.get_workflow(wf.pk)
    nodes = {n.name: n for n in got.nodes.all()}
    assert [n.name for n in got.nodes.all()] == ["extract", "load", "report"]
    extract = nodes["extract"]
    assert (extract.handler, extract.payload, extract.queue, extract.priority,
            extract.timeout_s, extract.max_attempts) == ("noop", {"n": 1}, "etl", 3, 30, 2)
    assert nodes["load"].task == "tests.djtasks_tasks.add"
    assert nodes["load"].payload == {"task": "tests.djtasks_tasks.add", "args": [1],
                                     "kwargs": {"b": 2}}
    assert extract.job.name == "etl/extract" and extract.job.schedule_id is None
    assert {(e.upstream.name, e.downstream.name) for e in got.edges.all()} == {
        ("extract", "load"), ("load", "report")}
    assert (got.schedule.cron, got.schedule.timezone, got.schedule.jitter_s) == (
        "0 3 * * *", "Europe/Berlin", 30)
    assert got.next_run_at is not None and got.next_run_at.astimezone(UTC).hour in (1, 2)
    # A node's job never runs by itself: its runs come from the workflow's runs.
    assert not WorkflowRun.objects.exists()
    from runs.models import Run
    assert not Run.objects.exists()


def test_start_refuses_a_bad_run_key_or_time_and_a_second_run_at_the_same_time():
    wf = services.create_workflow("w", [node("a")])
    at = datetime(2030, 1, 1, tzinfo=UTC)

    for bad in ({"run_key": ""}, {"run_key": "x" * 201}, {"scheduled_at": datetime(2030, 1, 1)}):
        with pytest.raises(InvalidJob):
            services.start_workflow_run(wf, **bad)
    services.start_workflow_run(wf, scheduled_at=at)
    with pytest.raises(services.SchedulerError, match="already has a run"):
        services.start_workflow_run(wf, scheduled_at=at)
    assert WorkflowRun.objects.count() == 1


def test_a_run_key_makes_the_start_idempotent():
    wf = services.create_workflow("w", [node("a"), node("b")], [["a", "b"]])

    first = services.start_workflow_run(wf, run_key="2030-01-01")
    again = services.start_workflow_run(wf, run_key="2030-01-01")

    assert (first.created, again.created, again.pk) == (True, False, first.pk)
    assert WorkflowRun.objects.count() == 1
    state = services.get_workflow_run(first.pk)
    assert [(n["name"], n["state"]) for n in state["nodes"]] == [("a", "running"),
                                                                 ("b", "pending")]
    assert state["nodes"][1]["upstream"] == ["a"]
