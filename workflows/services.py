"""The workflows' Python API (docs/workflows.md, "Python API"): create a workflow, start
and read its runs. The REST API and the admin call these same functions; control of a
run (cancel, pause, resume) is workflows/control.py.

Shapes are JSON-like so a REST view can pass a request body through unchanged:
``nodes`` a list of ``{name, handler | task, payload, args, kwargs, queue, priority,
timeout_s, max_attempts, trigger_rule}`` dicts, ``edges`` a list of ``[upstream,
downstream]`` pairs or ``{"from": upstream, "to": downstream}`` dicts, ``schedule`` a cron
expression or ``{cron, timezone, misfire_policy, max_lag_s, jitter_s}``. Everything
happens in one transaction on ``using``; runs reach the broker after it commits.
"""

from datetime import datetime

from django.db import IntegrityError, connections, transaction
from django.db.models import Count, QuerySet
from django.utils import timezone

from jobs import tenants
from jobs.models import Job, Schedule
from jobs.schedules import cron
from jobs.validation import moment_problem
from runs.clock import db_now
from runs.models import Attempt, Run
from scheduler_core import conf
from scheduler_core.exceptions import InvalidJob, SchedulerError
from scheduler_core.text import line_problem
from workflows.execution.engine import finish_if_done, start_ready
from workflows.execution.quota import unmade_node_runs
from workflows.execution.subflow_refs import resolve as resolve_subworkflows
from workflows.models import (
    RUN_KEY_MAX,
    MapItem,
    NodeRun,
    NodeState,
    Workflow,
    WorkflowEdge,
    WorkflowNode,
    WorkflowRun,
)
from workflows.validation import InvalidWorkflow, validate_workflow

__all__ = ["InvalidWorkflow", "create_workflow", "get_workflow", "get_workflow_run",
           "list_workflow_runs", "list_workflows", "start_workflow_run", "trigger"]


def _pk(obj) -> int:
    return obj.pk if hasattr(obj, "pk") else int(obj)


def create_workflow(name: str, nodes: list[dict], edges: list | tuple = (), *, owner=None,
                    schedule: str | dict | None = None, using: str = "default",
                    allow_tasks: bool = True) -> Workflow:
    """Create a workflow with its nodes and edges, all or nothing; returns it.

    ``nodes``, ``edges`` and ``schedule`` are shaped as the module docstring says. Each
    node becomes a job of the owner (its handler, payload, queue (default: the owner's
    default queue), priority (default 5), timeout_s (s) and max_attempts; a ``task``
    node a ``django_task`` job), checked by the jobs' rules and, given an ``owner`` (a
    user), its bounds: the queues it was given, its priority, timeout and attempts limits,
    and its jobs quota (``max_jobs`` counts one job per node). With a ``schedule`` the
    workflow starts a run at each occurrence (docs/cron.md's rules: timezone, misfire
    policy, max lag, jitter). ``allow_tasks`` False refuses task nodes (the REST API's
    rule, docs/security.md); a node may never name the ``django_task`` handler. Raises
    InvalidWorkflow naming every bad field (a cycle is named node by node; an ``owner``
    that is no user; a sub-workflow node's ``workflow`` that names no workflow of the
    owner, a cancelled one, one too deep or one that takes the workflow's expanded node
    count over WORKFLOW_MAX_NODES, workflows/execution/subflow_refs.py),
    runs.tenancy.quotas.QuotaExceeded; nothing is stored then. A node with ``workflow``
    starts a run of that workflow (docs/workflows.md, "Sub-workflows").
    """
    if owner is not None and not isinstance(getattr(owner, "pk", None), int):
        raise InvalidWorkflow({"owner": f"must be a user (a model instance), not {owner!r}"})
    owner_id = owner.pk if owner is not None else None
    bounds = tenants.bounds_of(owner_id, using)
    clean = validate_workflow(name, nodes, edges, schedule, bounds=bounds,
                              allow_tasks=allow_tasks)
    tenant_queue = bounds.default_queue if bounds is not None else tenants.SHARED_QUEUE
    with transaction.atomic(using=using):
        now = db_now(using)
        subworkflows = resolve_subworkflows(clean["nodes"], owner_id, using)
        if bounds is not None:
            tenants.check_quotas(bounds, len(clean["nodes"]), 0, using)
        sched = clean["schedule"]
        schedule_row = None
        if sched is not None:
            schedule_row = Schedule.objects.using(using).create(**sched)
        workflow = Workflow.objects.using(using).create(
            name=clean["name"], owner_id=owner_id, schedule=schedule_row,
            next_run_at=(cron.next_after(sched["cron"], sched["timezone"], now)
                         if sched is not None else None))
        jobs = Job.objects.using(using).bulk_create([
            # A node's job is a one-off job with no run of its own: its runs are made by
            # the workflow's runs (run_at records when the node was made).
            Job(name=spec["name"], owner_id=owner_id, handler=spec["handler"],
                payload=spec.get("payload") or {}, queue=spec.get("queue") or tenant_queue,
                priority=5 if spec.get("priority") is None else spec["priority"],
                run_at=now,
                timeout_s=spec.get("timeout_s") or conf.get("DEFAULT_TIMEOUT_S"),
                max_attempts=spec.get("max_attempts") or conf.get("DEFAULT_MAX_ATTEMPTS"),
                retry=spec.get("retry"), expires_in_s=spec.get("expires_in_s"),
                rate_key=spec.get("rate_key") or "",
                concurrency_key=spec.get("concurrency_key") or "",
                concurrency_limit=spec.get("concurrency_limit") or 1)
            for spec in clean["nodes"]], batch_size=1000)
        made = WorkflowNode.objects.using(using).bulk_create([
            WorkflowNode(workflow=workflow, name=spec["node"], job_id=job.pk,
                         trigger_rule=spec["trigger_rule"],
                         subworkflow_id=subworkflows.get(spec["node"]))
            for spec, job in zip(clean["nodes"], jobs, strict=True)], batch_size=1000)
        ids = {node.name: node.pk for node in made}
        for spec in clean["nodes"]:  # a mapped node's upstream (docs/workflows.md)
            if spec.get("map"):
                WorkflowNode.objects.using(using).filter(pk=ids[spec["node"]]).update(
                    map_over_id=ids[spec["map"]])
        WorkflowEdge.objects.using(using).bulk_create([
            WorkflowEdge(workflow=workflow, upstream_id=ids[up], downstream_id=ids[down])
            for up, down in clean["edges"]], batch_size=1000)
    return workflow


def get_workflow(workflow, using: str = "default") -> Workflow:
    """The Workflow ``workflow`` (an instance or id) with its nodes' jobs at hand
    (``workflow.nodes.all()``, each node's fields as properties). Raises
    Workflow.DoesNotExist."""
    return (Workflow.objects.using(using).select_related("schedule")
            .prefetch_related("nodes__job", "edges").get(pk=_pk(workflow)))


def list_workflows(owner=None, using: str = "default") -> QuerySet:
    """The workflows of ``owner`` (a user, or its id; None: every owner's), newest first,
    each with ``node_count`` (its number of nodes) and its schedule at hand. A QuerySet:
    filter or page it further."""
    workflows = Workflow.objects.using(using).select_related("schedule", "owner").annotate(
        node_count=Count("nodes", distinct=True)).order_by("-id")
    if owner is not None:
        workflows = workflows.filter(owner_id=_pk(owner))
    return workflows


def list_workflow_runs(workflow=None, *, state: str | None = None,
                       using: str = "default") -> QuerySet:
    """The runs of ``workflow`` (an instance or id; None: every workflow's), newest
    ``scheduled_at`` first, optionally only those in ``state`` (a WorkflowRunState value).
    A QuerySet: filter or page it further; get_workflow_run gives one run's nodes."""
    runs = WorkflowRun.objects.using(using).order_by("-scheduled_at", "-id")
    if workflow is not None:
        runs = runs.filter(workflow_id=_pk(workflow))
    if state is not None:
        runs = runs.filter(state=state)
    return runs


def _check_start(run_key, scheduled_at, started_by) -> None:
    errors = {}
    if started_by not in WorkflowRun.StartedBy.values:
        errors["started_by"] = f"must be one of {', '.join(WorkflowRun.StartedBy.values)}"
    if run_key is not None and (not isinstance(run_key, str) or not run_key
                                or len(run_key) > RUN_KEY_MAX or "\x00" in run_key):
        errors["run_key"] = f"must be a non-empty text of at most {RUN_KEY_MAX} characters"
    elif run_key is not None and (problem := line_problem(run_key)):
        errors["run_key"] = problem
    if scheduled_at is not None and (not isinstance(scheduled_at, datetime)
                                     or timezone.is_naive(scheduled_at)
                                     or moment_problem(scheduled_at)):
        errors["scheduled_at"] = "must be an aware datetime between 1970 and 9998"
    if errors:
        raise InvalidJob(errors)


def begin_run(workflow: Workflow, scheduled_at: datetime, started_by: str,
              run_key: str | None, now: datetime, using: str) -> WorkflowRun | None:
    """Insert a workflow run of ``workflow`` at ``scheduled_at`` with a pending node run
    per node, and start its nodes without upstreams; None when the workflow already has
    a run at that time or with that key (UNIQUE (workflow, scheduled_at) and (workflow,
    run_key): nothing is stored then). Call inside a transaction."""
    try:
        with transaction.atomic(using=using):
            workflow_run = WorkflowRun.objects.using(using).create(
                workflow=workflow, scheduled_at=scheduled_at, run_key=run_key or "",
                started_by=started_by)
    except IntegrityError:
        return None
    # One INSERT ... SELECT of the node runs, not a model instance each: bulk_create of a
    # 100-node chain's node runs was a third of the start call (BENCHMARKS.md, "W7").
    with connections[using].cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {NodeRun._meta.db_table} (workflow_run_id, node_id, state, error)"
            f" SELECT %s, id, %s, '' FROM {WorkflowNode._meta.db_table} WHERE workflow_id = %s",
            [workflow_run.pk, NodeState.PENDING.value, workflow.pk])
    roots = WorkflowNode.objects.using(using).filter(workflow=workflow).exclude(
        pk__in=WorkflowEdge.objects.using(using).filter(workflow=workflow)
        .values("downstream_id")).values("pk")
    running: set = set()
    start_ready([workflow_run.pk], now, using, node_ids=roots, running=running)
    if workflow_run.pk not in running:
        # No node could start (PostgreSQL says which did; elsewhere always asked): a run
        # with a node just started is not done, and asking cost a tenth of the start.
        finish_if_done([workflow_run.pk], now, using)
    workflow_run.created = True
    return workflow_run


def start_workflow_run(workflow, *, run_key: str | None = None,
                       scheduled_at: datetime | None = None, using: str = "default",
                       started_by: str = WorkflowRun.StartedBy.API) -> WorkflowRun:
    """Start a run of ``workflow`` (an instance or id) at ``scheduled_at`` (aware datetime;
    default the database's now; a later time holds its first runs until then) and return
    it; its nodes without upstreams get their runs at once.

    ``run_key`` (text, at most 200 characters) makes the start idempotent: a workflow run
    of this workflow with that key is returned as it is instead, with ``created`` False
    (a new one has ``created`` True), also when two starts race. ``started_by`` is one of
    WorkflowRun.StartedBy's values. Raises InvalidJob for a bad ``run_key``,
    ``scheduled_at`` or ``started_by``, SchedulerError when the workflow is paused or
    already has a run at ``scheduled_at``, runs.tenancy.quotas.QuotaExceeded when its nodes (all of
    them: each becomes a pending run in time) with the owner's pending runs and the nodes
    its live workflow runs have yet to start would exceed ``max_pending``,
    Workflow.DoesNotExist.
    """
    _check_start(run_key, scheduled_at, started_by)
    with transaction.atomic(using=using):
        # Locked, so a pause_workflow waits for this start and one that returned first is
        # read here: no run appears once a pause has returned (docs/workflows.md, "Cancel
        # and pause"). The scheduler's tick takes the same row lock (workflows/ticks.py).
        wf = Workflow.objects.using(using).select_for_update().get(pk=_pk(workflow))
        existing = _by_key(wf, run_key, using)
        if existing is not None:
            return existing
        if wf.status == Workflow.Status.CANCELLED:
            raise SchedulerError(f"workflow {wf.pk} is cancelled: it starts no run again")
        if wf.status != Workflow.Status.ACTIVE:
            raise SchedulerError(f"workflow {wf.pk} is {wf.status}; resume it to start runs")
        bounds = tenants.bounds_of(wf.owner_id, using)
        if bounds is not None:
            # Every node becomes a pending run in time, the downstream ones in an ack that
            # refuses nothing: the start is admitted for all of them at once, and the node
            # runs other live workflow runs have yet to make count as pending already
            # (docs/workflows.md, "Starts"; a start of few roots could fan out past it).
            nodes = WorkflowNode.objects.using(using).filter(workflow=wf).count()
            tenants.check_quotas(bounds, 0, nodes, using, promised=unmade_node_runs)
        now = db_now(using)
        when = scheduled_at or now
        workflow_run = begin_run(wf, when, started_by, run_key, now, using)
        if workflow_run is not None:
            return workflow_run
        existing = _by_key(wf, run_key, using)
        if existing is not None:
            return existing
        raise SchedulerError(f"workflow {wf.pk} already has a run at {when.isoformat()}")


def _by_key(workflow: Workflow, run_key: str | None, using: str) -> WorkflowRun | None:
    if not run_key:
        return None
    found = WorkflowRun.objects.using(using).filter(workflow=workflow, run_key=run_key).first()
    if found is not None:
        found.created = False
    return found


def trigger(workflow, using: str = "default") -> WorkflowRun:
    """Start a run of ``workflow`` now (``started_by`` trigger); raises as
    start_workflow_run."""
    return start_workflow_run(workflow, using=using, started_by=WorkflowRun.StartedBy.TRIGGER)


def map_counts(node_run_ids: list[int], using: str = "default") -> dict[int, dict]:
    """{node run id: {"total": items, <NodeState>: items in it}} of the mapped node runs
    ``node_run_ids`` (one query; none without ids): what the workflow run's view and a
    graph drawing a mapped node collapsed show of it."""
    found: dict[int, dict] = {pk: {"total": 0} for pk in node_run_ids}
    if not node_run_ids:
        return found
    for node_run_id, state, n in (MapItem.objects.using(using)
                                  .filter(node_run_id__in=node_run_ids)
                                  .values("node_run_id", "state").annotate(n=Count("pk"))
                                  .values_list("node_run_id", "state", "n")):
        found[node_run_id][state] = n
        found[node_run_id]["total"] += n
    return found


def child_counts(pairs: dict[int, int], using: str = "default") -> dict[int, dict]:
    """{node run id: {"id": child workflow run id, "state": its state, "nodes": {node
    state: count}}} for ``pairs`` ({sub-workflow node run id: its child workflow run id};
    two queries, none without pairs): what the workflow run's view and the admin's graph
    show of a sub-workflow node (docs/workflows.md, "Sub-workflows")."""
    if not pairs:
        return {}
    states = dict(WorkflowRun.objects.using(using).filter(pk__in=list(pairs.values()))
                  .values_list("pk", "state"))
    nodes: dict[int, dict] = {}
    for wr_id, state, n in (NodeRun.objects.using(using)
                            .filter(workflow_run_id__in=list(pairs.values()))
                            .values("workflow_run_id", "state").annotate(n=Count("pk"))
                            .values_list("workflow_run_id", "state", "n")):
        nodes.setdefault(wr_id, {})[state] = n
    return {pk: {"id": child, "state": states.get(child), "nodes": nodes.get(child, {})}
            for pk, child in pairs.items()}


def get_workflow_run(workflow_run, using: str = "default") -> dict:
    """A workflow run and every node's state, as JSON-like data: ``{id, workflow,
    scheduled_at, run_key, state, started_by, created_at, finished_at, error, parent,
    nodes}``, ``parent`` the ``{workflow_run, node}`` that started this run, or None;
    ``nodes`` a list (in creation order) of ``{name, state, trigger_rule, upstream
    (names), run_id, run_state, attempt, max_attempts, ready_at, first_started_at,
    started_at, finished_at, error, items, map, workflow, child}``, ``map`` the name of
    the node a mapped node maps over (else None), ``items`` None but for a mapped node
    that fanned out: ``{"total": n, <state>: count, ...}`` of its items
    (docs/workflows.md, "Mapped nodes"); ``workflow`` a sub-workflow node's workflow id
    and ``child`` its child run's ``{id, state, nodes}`` once started (child_counts),
    else None ("Sub-workflows"); times are aware UTC datetimes, ``first_started_at`` the
    first attempt's start, ``started_at`` the current or last attempt's. Raises
    WorkflowRun.DoesNotExist."""
    wr = WorkflowRun.objects.using(using).get(pk=_pk(workflow_run))
    node_runs = list(NodeRun.objects.using(using).filter(workflow_run=wr)
                     .select_related("node__job", "node__map_over").order_by("node_id"))
    upstream: dict[int, list[str]] = {}
    for down, name in (WorkflowEdge.objects.using(using).filter(workflow_id=wr.workflow_id)
                       .values_list("downstream_id", "upstream__name")):
        upstream.setdefault(down, []).append(name)
    runs = {r[0]: r[1:] for r in Run.objects.using(using).filter(
        pk__in=[n.run_id for n in node_runs if n.run_id]).values_list(
        "id", "state", "attempt", "max_attempts", "started_at")}
    first = dict(Attempt.objects.using(using).filter(run_id__in=list(runs), number=1)
                 .values_list("run_id", "started_at"))
    items = map_counts([n.pk for n in node_runs if n.items is not None], using)
    children = child_counts({n.pk: n.child_run_id for n in node_runs if n.child_run_id},
                            using)
    nodes = []
    for n in node_runs:
        # A node not started yet has no run: its attempts are its job's.
        run = runs.get(n.run_id, (None, 0, n.node.job.max_attempts, None))
        nodes.append({"name": n.node.name, "state": n.state,
                      "trigger_rule": n.node.trigger_rule,
                      "upstream": sorted(upstream.get(n.node_id, [])), "run_id": n.run_id,
                      "run_state": run[0], "attempt": run[1], "max_attempts": run[2],
                      "ready_at": n.ready_at, "first_started_at": first.get(n.run_id),
                      "started_at": run[3],
                      "finished_at": n.finished_at, "error": n.error,
                      "items": items.get(n.pk), "workflow": n.node.subworkflow_id,
                      "map": n.node.map_over.name if n.node.map_over_id else None,
                      "child": children.get(n.pk)})
    parent = (NodeRun.objects.using(using).filter(child_run_id=wr.pk)
              .values("workflow_run_id", "node__name").first())
    return {"id": wr.pk, "workflow": wr.workflow_id, "scheduled_at": wr.scheduled_at,
            "run_key": wr.run_key, "state": wr.state, "started_by": wr.started_by,
            "created_at": wr.created_at, "finished_at": wr.finished_at, "error": wr.error,
            "parent": parent and {"workflow_run": parent["workflow_run_id"],
                                  "node": parent["node__name"]},
            "nodes": nodes}
