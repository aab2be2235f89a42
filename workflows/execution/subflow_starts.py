"""Starting the children of many sub-workflow nodes at once (docs/workflows.md,
"Sub-workflows"): the checks, start times and inserts of workflows/execution/subflows.py's
start_children, batched, so that its cost does not grow with the number of children.

One child at a time cost 16 queries and 50-100 ms (a max_pending check over the owner's
runs, the nesting depth walked up the tree, a search for a free start time, the node
count, the workflow run's own start): a workflow of 20 nodes each starting a workflow of
20 nodes took 27 s to start its 421 workflow runs. Here a level of children takes a
fixed number of queries whatever its width: one depth walk, one quota check per owner,
one start-time search per child workflow, one insert of the workflow runs, one of their
node runs and one start of their roots, whose own children form the next level.
"""

from collections import Counter
from datetime import datetime, timedelta

from django.db import IntegrityError, connections, transaction
from django.db.models import Count, Max

from runs.tenancy.quotas import QuotaExceeded, bounds_of, check_quotas
from scheduler_core import conf
from workflows.execution.engine import finish_if_done, start_ready
from workflows.models import (
    NodeRun,
    NodeState,
    Workflow,
    WorkflowEdge,
    WorkflowNode,
    WorkflowRun,
)

# A child's scheduled_at is its parent node's time, or 1 µs after the latest run of its
# workflow within WINDOW of it (UNIQUE (workflow, scheduled_at)).
WINDOW = timedelta(seconds=1)
TICK = timedelta(microseconds=1)


class ChildRefused(Exception):
    """A sub-workflow node's child cannot start: ``str()`` says why (the node's error)."""


def depths(workflow_run_ids: set[int], using: str) -> dict[int, int]:
    """{workflow run id: how many parents it has} for ``workflow_run_ids`` (0: started
    on its own), following each child's parent node run, all of them level by level (a
    query a level); stops past WORKFLOW_MAX_DEPTH. Raises what the database raises."""
    found = dict.fromkeys(workflow_run_ids, 0)
    at = {wr: wr for wr in workflow_run_ids}  # each run: the ancestor reached so far
    for level in range(1, conf.get("WORKFLOW_MAX_DEPTH") + 2):
        if not at:
            break
        parents = dict(NodeRun.objects.using(using)
                       .filter(child_run_id__in=set(at.values()))
                       .values_list("child_run_id", "workflow_run_id"))
        at = {wr: parents[up] for wr, up in at.items() if up in parents}
        found.update(dict.fromkeys(at, level))
    return found


def check(child_wf: Workflow | None, owner_id: int | None, depth: int) -> None:
    """Raise ChildRefused unless a sub-workflow node of ``owner_id`` (a user id or None)
    in a workflow run with ``depth`` parents may start ``child_wf``: it exists, is the
    same owner's, is active and the nesting stays within WORKFLOW_MAX_DEPTH. No query."""
    if child_wf is None:
        raise ChildRefused("its workflow no longer exists; nothing was started")
    name = f"workflow {child_wf.pk} ({child_wf.name!r})"
    if child_wf.owner_id != owner_id:
        raise ChildRefused(f"{name} is another owner's: a node starts only its own "
                           "owner's workflows; nothing was started")
    if child_wf.status != Workflow.Status.ACTIVE:
        raise ChildRefused(f"{name} is {child_wf.status}: it starts no run; nothing was "
                           "started")
    limit = conf.get("WORKFLOW_MAX_DEPTH")
    if depth + 1 > limit:
        raise ChildRefused(f"starting {name} would nest workflow runs more than "
                           f"WORKFLOW_MAX_DEPTH ({limit}) deep; nothing was started")


def node_counts(workflow_ids, using: str) -> dict[int, int]:
    """{workflow id: its number of nodes} for ``workflow_ids``, one query."""
    return dict(WorkflowNode.objects.using(using).filter(workflow_id__in=list(workflow_ids))
                .values("workflow_id").annotate(n=Count("pk")).values_list("workflow_id", "n"))


def check_pending(child_wf: Workflow, owner_id: int | None, nodes: int, using: str) -> None:
    """Raise ChildRefused when the ``nodes`` of one run of ``child_wf`` would take
    ``owner_id`` over ``max_pending`` (its start counted the node itself as one)."""
    bounds = bounds_of(owner_id, using)
    if bounds is not None and nodes > 1:
        try:
            check_quotas(bounds, 0, nodes - 1, using)
        except QuotaExceeded as exc:
            raise ChildRefused(f"the {nodes} nodes of workflow {child_wf.pk} "
                               f"({child_wf.name!r}) would take the owner over "
                               f"max_pending: {exc}; nothing was started") from None


def all_fit(owners: Counter, using: str) -> bool:
    """Whether each owner's new pending node runs (``owners``: {owner id: count}) fit
    its ``max_pending`` together, one quota check an owner."""
    for owner_id, new in owners.items():
        bounds = bounds_of(owner_id, using)
        if bounds is None or not new:
            continue
        try:
            check_quotas(bounds, 0, new, using)
        except QuotaExceeded:
            return False
    return True


def begin_many(starts: list[tuple[int, Workflow, datetime]], now: datetime,
               using: str) -> dict[int, int] | None:
    """Start a run of each ``(node run id, child workflow, at)`` of ``starts`` at ``at``
    or the next free microsecond after the latest run of that workflow within WINDOW,
    point each node run (pending, locked by the caller) at its child, then insert the
    children's node runs and start their roots (whose own children start as the next
    level, through the engine). Returns {node run id: child workflow run id}, or None
    with nothing stored when a start time was taken meanwhile or WINDOW is full: the
    caller then starts them one at a time. ``now``: the database's time."""
    after = {}  # per workflow id: the first instant after those taken (None: none taken)
    for wf_id in {wf.pk for _, wf, _ in starts}:
        ats = [at for _, wf, at in starts if wf.pk == wf_id]
        last = WorkflowRun.objects.using(using).filter(
            workflow_id=wf_id, scheduled_at__gte=min(ats), scheduled_at__lt=max(ats) + WINDOW,
        ).aggregate(last=Max("scheduled_at"))["last"]
        after[wf_id] = None if last is None else last + TICK
    # In order of time: a child of a parent started 1 µs after its sibling has its own
    # children 1 µs later too, whose instants the sibling's children must not take.
    slot_of = {}  # index in starts: its scheduled_at
    for i in sorted(range(len(starts)), key=lambda i: starts[i][2]):
        _, wf, at = starts[i]
        slot = at if after[wf.pk] is None else max(at, after[wf.pk])
        if slot >= at + WINDOW:
            return None
        slot_of[i] = after[wf.pk] = slot
        after[wf.pk] += TICK
    runs = [WorkflowRun(workflow=wf, scheduled_at=slot_of[i], run_key="",
                        started_by=WorkflowRun.StartedBy.PARENT)
            for i, (_, wf, _) in enumerate(starts)]
    try:
        with transaction.atomic(using=using):
            WorkflowRun.objects.using(using).bulk_create(runs)
    except IntegrityError:
        return None
    children = {node_run_id: run.pk
                for (node_run_id, _, _), run in zip(starts, runs, strict=True)}
    # Pointed at before the children start, so their own children count their depth. One
    # UPDATE ... FROM a list (PostgreSQL, SQLite 3.33+): bulk_update's CASE over 400 node
    # runs took half a second.
    table, pairs = NodeRun._meta.db_table, ", ".join(["(%s, %s)"] * len(children))
    with connections[using].cursor() as cursor:
        cursor.execute(
            f"WITH v (node_run, child) AS (VALUES {pairs}) UPDATE {table} SET state = %s,"
            f" child_run_id = v.child, ready_at = %s, error = '' FROM v"
            f" WHERE {table}.id = v.node_run",
            [*(x for pair in children.items() for x in pair), NodeState.RUNNING.value,
             connections[using].ops.adapt_datetimefield_value(now)])
    ids = [run.pk for run in runs]
    marks = ", ".join(["%s"] * len(ids))
    with connections[using].cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {NodeRun._meta.db_table} (workflow_run_id, node_id, state, error)"
            f" SELECT r.id, n.id, %s, '' FROM {WorkflowRun._meta.db_table} AS r"
            f" JOIN {WorkflowNode._meta.db_table} AS n ON n.workflow_id = r.workflow_id"
            f" WHERE r.id IN ({marks})", [NodeState.PENDING.value, *ids])
    workflows = {wf.pk for _, wf, _ in starts}
    roots = WorkflowNode.objects.using(using).filter(workflow_id__in=workflows).exclude(
        pk__in=WorkflowEdge.objects.using(using).filter(workflow_id__in=workflows)
        .values("downstream_id")).values("pk")
    running: set = set()
    start_ready(ids, now, using, node_ids=roots, running=running)
    # No node could start (PostgreSQL says which did; elsewhere always asked): it ends at
    # once, and its end ends its parent's node (engine.finish_if_done).
    finish_if_done([pk for pk in ids if pk not in running], now, using)
    return children
