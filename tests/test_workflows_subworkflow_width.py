"""A wide tree of sub-workflows (docs/workflows.md, "Sub-workflows"): a workflow whose
nodes each start a workflow whose nodes each start another once made 421 workflow runs
in one start at 50-100 ms each, a 30 s request, a worker's ack and the scheduler's tick
held for everyone. Its expanded node count is bounded by WORKFLOW_MAX_NODES at
creation, and a start's cost does not grow with its number of children."""

import pytest
from django.contrib.auth.models import User

from workflows import services
from workflows.models import Workflow
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
