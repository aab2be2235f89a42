"""A wide tree of sub-workflows (docs/workflows.md, "Sub-workflows"): a workflow whose
nodes each start a workflow whose nodes each start another once made 421 workflow runs
in one start at 50-100 ms each, a 30 s request, a worker's ack and the scheduler's tick
held for everyone. Its expanded node count is bounded by WORKFLOW_MAX_NODES at
creation, and a start's cost does not grow with its number of children."""

import pytest
from django.contrib.auth.models import User
from django.db import connections
from django.test.utils import CaptureQueriesContext

from workflows import services
from workflows.models import NodeRun, NodeState, Workflow, WorkflowRun
from workflows.validation import InvalidWorkflow

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


def fan(name, ref, width, owner, using="default"):
    return services.create_workflow(
        name, [{"name": f"n{i}", "workflow": ref} for i in range(width)], owner=owner,
        using=using)


def test_a_tree_expanding_past_workflow_max_nodes_is_refused_at_creation(settings):
    settings.SCHEDULER = {**settings.SCHEDULER, "WORKFLOW_MAX_NODES": 100}
    me = User.objects.create(username="me")
    services.create_workflow("f0", [{"name": "n", "handler": "noop"}], owner=me)
    fan("f1", "f0", 20, me)  # 20 + 20 x 1 = 40 nodes expanded
    services.create_workflow("f2", [{"name": "a", "workflow": "f1"},
                                    {"name": "b", "workflow": "f1"}], owner=me)  # 82

    with pytest.raises(InvalidWorkflow) as bad:
        services.create_workflow("f3", [{"name": "x", "handler": "noop"},
                                        {"name": "y", "workflow": "f2"},
                                        {"name": "z", "workflow": "f1"}], owner=me)
    # 3 + 82 + 40 = 125: named at the node whose workflow expands most.
    assert bad.value.errors == {"nodes[1].workflow": (
        "this workflow would expand to 125 nodes through its sub-workflows (its own 3, 82 "
        "through this node's workflow), more than WORKFLOW_MAX_NODES (100): one run of it "
        "makes a run of every one of them")}
    with pytest.raises(InvalidWorkflow) as bad:
        fan("wide", "f1", 20, me)  # 20 + 20 x 40 = 820
    assert "would expand to 820 nodes" in bad.value.errors["nodes[0].workflow"]
    # A tree far past the bound stops counting there.
    settings.SCHEDULER = {**settings.SCHEDULER, "WORKFLOW_MAX_NODES": 50}
    with pytest.raises(InvalidWorkflow) as bad:
        services.create_workflow("f4", [{"name": "y", "workflow": "f2"}], owner=me)
    assert "more than 50 nodes" in bad.value.errors["nodes[0].workflow"]
    assert not Workflow.objects.filter(name__in=["f3", "wide", "f4"]).exists()

    # At the bound exactly it is taken.
    settings.SCHEDULER = {**settings.SCHEDULER, "WORKFLOW_MAX_NODES": 125}
    services.create_workflow("f3", [{"name": "x", "handler": "noop"},
                                    {"name": "y", "workflow": "f2"},
                                    {"name": "z", "workflow": "f1"}], owner=me)


def start_queries(using, width, owner):
    """Queries of starting a two-level tree ``width`` wide at each level: 1 + width +
    width² workflow runs."""
    services.create_workflow(f"leaf{width}", [{"name": "n", "handler": "noop"}],
                             owner=owner, using=using)
    fan(f"mid{width}", f"leaf{width}", width, owner, using)
    top = fan(f"top{width}", f"mid{width}", width, owner, using)
    with CaptureQueriesContext(connections[using]) as queries:
        wr = services.start_workflow_run(top, using=using)
    made = WorkflowRun.objects.using(using).filter(pk__gte=wr.pk).count()
    return len(queries.captured_queries), made


def test_starting_many_children_costs_no_more_queries_than_few(broker, settings):
    """Each child once cost 16 queries (a max_pending check, a walk up the tree for its
    depth, a search for a free start time, its own start): 421 workflow runs took 27 s
    and 6,799 queries. Now a level of children starts in a fixed number of queries."""
    if connections[broker.using].vendor != "postgresql":
        pytest.skip("elsewhere the engine points each root's node run at its run alone")
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name}
    using = broker.using
    me = User.objects.db_manager(using).create(username="me")

    few, few_made = start_queries(using, 4, me)
    many, many_made = start_queries(using, 12, me)

    assert (few_made, many_made) == (1 + 4 + 16, 1 + 12 + 144)
    assert many <= few + 2, (few, many)
    started = NodeRun.objects.using(using).filter(child_run_id__isnull=False)
    assert started.count() == 4 + 16 + 12 + 144
    assert started.exclude(state=NodeState.RUNNING).count() == 0
