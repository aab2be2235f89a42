"""A sub-workflow node's ``workflow`` resolved at creation (docs/workflows.md,
"Sub-workflows"): an id or a name of one of the owner's workflows that is not cancelled,
nested at most WORKFLOW_MAX_DEPTH levels deep counting the new workflow.

A node can name only a workflow that exists already, and a workflow's graph is fixed
once created, so no workflow can start itself, directly or through others: a cycle
cannot be written. The depth bound keeps a chain of them (and the reads of ``ctx.upstream``
that follow it) short; the bound on the expanded node count keeps a wide tree of them
(20 nodes each starting a workflow of 20 nodes each starting another) from making
thousands of runs in one start, which held one transaction for tens of seconds.
"""

from collections import Counter

from django.db.models import Count

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


def expanded(workflow_id: int, using: str) -> int:
    """How many node runs (an int) one run of workflow ``workflow_id`` (an int) makes
    through nesting: its own nodes plus, for each sub-workflow node, the expanded count
    of the workflow it names, followed level by level (two queries a level, at most
    WORKFLOW_MAX_DEPTH + 1 levels). Stops counting once past WORKFLOW_MAX_NODES, so a
    return above it means "too many" (docs/workflows.md, "Sub-workflows")."""
    cap, total = conf.get("WORKFLOW_MAX_NODES"), 0
    level = Counter({workflow_id: 1})  # workflow id: how many runs of it one run makes
    for _ in range(conf.get("WORKFLOW_MAX_DEPTH") + 1):
        nodes = dict(WorkflowNode.objects.using(using).filter(workflow_id__in=list(level))
                     .values("workflow_id").annotate(n=Count("pk"))
                     .values_list("workflow_id", "n"))
        total += sum(times * nodes.get(wf, 0) for wf, times in level.items())
        if total > cap:
            return total
        below = Counter()
        for wf, sub in (WorkflowNode.objects.using(using)
                        .filter(workflow_id__in=list(level), subworkflow_id__isnull=False)
                        .values_list("workflow_id", "subworkflow_id")):
            below[sub] += level[wf]
        if not below:
            break
        level = below
    return total


def resolve(nodes: list[dict], owner_id: int | None, using: str) -> dict[str, int]:
    """{node name: workflow id} for the cleaned ``nodes`` (validate_workflow's) that
    have a ``workflow`` (an id or a name). Raises InvalidWorkflow naming
    ``nodes[i].workflow`` when it names no workflow of the owner ``owner_id`` (a user id
    or None: the workflows without an owner), one that is cancelled, a name two of them
    share, a workflow so deep that the new one would nest more than
    WORKFLOW_MAX_DEPTH levels, or (naming the node whose workflow expands most) when
    the new workflow's expanded node count (its nodes plus each named workflow's
    ``expanded``) would exceed WORKFLOW_MAX_NODES (docs/workflows.md, "Validation",
    "Sub-workflows")."""
    found, errors, sizes = {}, {}, {}
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
            sizes[where] = expanded(matches[0][0], using)
    if sizes and not errors:
        _check_expanded(len(nodes), sizes, errors)
    if errors:
        raise InvalidWorkflow(errors)
    return found


def _check_expanded(own: int, sizes: dict[str, int], errors: dict[str, str]) -> None:
    """Add to ``errors`` the sub-workflow node whose workflow expands most when the new
    workflow's ``own`` nodes plus ``sizes`` ({"nodes[i].workflow": expanded count})
    exceed WORKFLOW_MAX_NODES: a run of it would make more node runs than a workflow of
    WORKFLOW_MAX_NODES nodes, all in its start's transaction when the children start at
    once."""
    cap, total = conf.get("WORKFLOW_MAX_NODES"), own + sum(sizes.values())
    if total <= cap:
        return
    where = max(sizes, key=sizes.get)
    # expanded() stops counting past the cap: its figure is then a lower bound.
    words = str(total) if max(sizes.values()) <= cap else f"more than {cap}"
    errors[where] = (
        f"this workflow would expand to {words} nodes through its sub-workflows (its own "
        f"{own}, {sizes[where] if sizes[where] <= cap else f'more than {cap}'} through "
        f"this node's workflow), more than WORKFLOW_MAX_NODES ({cap}): one run of it "
        "makes a run of every one of them")
