"""A sub-workflow node's ``workflow`` resolved at creation (docs/workflows.md,
"Sub-workflows"): an id or a name of one of the owner's workflows that is not cancelled,
nested at most WORKFLOW_MAX_DEPTH levels deep counting the new workflow.

A node can name only a workflow that exists already, and a workflow's graph is fixed
once created, so no workflow can start itself, directly or through others: a cycle
cannot be written. The depth bound keeps a chain of them (and the reads of ``ctx.upstream``
that follow it) short.
"""

from scheduler_core import conf
from workflows.models import Workflow, WorkflowNode
from workflows.validation import InvalidWorkflow


def depth_below(workflow_id: int, using: str) -> int:
    """How many levels of sub-workflows (an int; 0: none) a run of workflow
    ``workflow_id`` (an int) starts below itself, following its nodes' workflows level
    by level, at most WORKFLOW_MAX_DEPTH + 1 (docs/workflows.md, "Sub-workflows")."""
    depth, level = 0, {workflow_id}
    while level and depth <= conf.get("WORKFLOW_MAX_DEPTH"):
        level = set(WorkflowNode.objects.using(using).filter(
            workflow_id__in=level, subworkflow_id__isnull=False)
            .values_list("subworkflow_id", flat=True))
        if level:
            depth += 1
    return depth


def resolve(nodes: list[dict], owner_id: int | None, using: str) -> dict[str, int]:
    """{node name: workflow id} for the cleaned ``nodes`` (validate_workflow's) that
    have a ``workflow`` (an id or a name). Raises InvalidWorkflow naming
    ``nodes[i].workflow`` when it names no workflow of the owner ``owner_id`` (a user id
    or None: the workflows without an owner), one that is cancelled, a name two of them
    share, or a workflow so deep that the new one would nest more than
    WORKFLOW_MAX_DEPTH levels (docs/workflows.md, "Validation", "Sub-workflows")."""
    found, errors = {}, {}
    mine = Workflow.objects.using(using).filter(owner_id=owner_id)
    limit = conf.get("WORKFLOW_MAX_DEPTH")
    for i, node in enumerate(nodes):
        ref = node.get("workflow")
        if ref is None:
            continue
        where = f"nodes[{i}].workflow"
        named = mine.filter(**{"pk" if isinstance(ref, int) else "name": ref})
        # A name means the one workflow of that name not cancelled: a cancelled "etl" and
        # the "etl" that replaced it are no ambiguity (a cancelled one starts nothing).
        matches = list(named.exclude(status=Workflow.Status.CANCELLED)
                       .values_list("pk", "status")[:2]) \
            or list(named.values_list("pk", "status")[:1])
        if not matches:
            errors[where] = f"names no workflow {ref!r} of this workflow's owner: a node " \
                            "starts only its own owner's workflows, which exist already"
        elif len(matches) > 1:
            errors[where] = f"{ref!r} is the name of more than one workflow: give its id"
        elif matches[0][1] == Workflow.Status.CANCELLED:
            errors[where] = f"workflow {matches[0][0]} is cancelled: it starts no run"
        elif depth_below(matches[0][0], using) + 1 > limit:
            errors[where] = f"workflow {matches[0][0]} has sub-workflows of its own so " \
                            f"deep that this one would nest more than WORKFLOW_MAX_DEPTH " \
                            f"({limit}) levels"
        else:
            found[node["node"]] = matches[0][0]
    if errors:
        raise InvalidWorkflow(errors)
    return found
