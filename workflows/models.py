"""Workflows: named nodes (each a job's handler or django.tasks task) and the edges
between them, and their runs (docs/workflows.md, "The model").

A node runs as an ordinary run of its own job (``WorkflowNode.job``, created with the
workflow), so brokers, queues, priorities, owner limits, retries and the dead letter all
apply unchanged. A workflow run keeps one NodeRun per node; UNIQUE (workflow_run, node)
and UNIQUE (run_id) are what make "exactly one run per node per workflow run" a database
rule rather than luck, and the runs table's own UNIQUE (job, scheduled_at) says it again:
every run of a node in one workflow run has that workflow run's ``scheduled_at``.

NodeRun.run_id is a plain indexed integer, not a foreign key: the runs table may be
partitioned by time, and a history retention that deletes a node's old run must not be
blocked by (or cascade into) the workflow's own history.
"""

from django.conf import settings
from django.db import models
from django.db.models import Q

from jobs.models import Job, Schedule
from jobs.models.backfill import BackfillBase

NAME_MAX = 200
RUN_KEY_MAX = 200


class Workflow(models.Model):
    """A graph of jobs, owned like jobs. ``schedule`` (the jobs' own Schedule: cron,
    timezone, misfire policy, max lag, jitter) starts a workflow run per occurrence;
    ``next_run_at`` (UTC) is the next occurrence not yet started, advanced by the
    scheduler with a fenced UPDATE like a cron job's. ``status`` paused stops the
    schedule only: workflow runs already started go on."""

    class Status(models.TextChoices):
        ACTIVE = "active"
        PAUSED = "paused"
        CANCELLED = "cancelled"  # for good: control.cancel_workflow

    name = models.CharField(max_length=NAME_MAX)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
        related_name="workflows", db_index=False,
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    schedule = models.OneToOneField(
        Schedule, null=True, blank=True, on_delete=models.PROTECT, related_name="workflow")
    next_run_at = models.DateTimeField(null=True, blank=True)
    paused_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [
            models.Index(fields=["next_run_at"], name="workflow_due_active",
                         condition=Q(status="active", next_run_at__isnull=False)),
            models.Index(fields=["owner", "status"], name="workflow_owner_status"),
        ]

    def __str__(self) -> str:
        return self.name


class WorkflowNode(models.Model):
    """One node: ``name`` (unique in its workflow), the job whose runs it makes and its
    ``trigger_rule`` (workflows/execution/rules.py). What
    the node runs (handler, payload, queue, priority, timeout_s, max_attempts) is that
    job's, shown here as properties; a django.tasks node's job has the ``django_task``
    handler with the task's path in its payload (``task``)."""

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=NAME_MAX)
    job = models.OneToOneField(Job, on_delete=models.PROTECT, related_name="workflow_node")
    # When the node runs, by its upstreams' states: workflows/execution/rules.py (which checks it;
    # no choices here, so a new rule needs no migration).
    trigger_rule = models.CharField(max_length=16, default="all_success")
    # A mapped node (docs/workflows.md, "Mapped nodes"): run once per item of this
    # upstream node's result list; None for a plain node.
    map_over = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE,
                                 related_name="mapped_by")
    # A sub-workflow node (docs/workflows.md, "Sub-workflows"): starts a run of this
    # workflow and ends as it ends; None for any other node. PROTECT: a workflow another
    # one starts cannot be deleted from under it.
    subworkflow = models.ForeignKey(Workflow, null=True, blank=True, on_delete=models.PROTECT,
                                    related_name="used_by")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workflow", "name"], name="workflow_node_name"),
        ]
        ordering = ["workflow", "id"]

    def __str__(self) -> str:
        return f"{self.workflow_id}:{self.name}"

    @property
    def handler(self) -> str:
        return self.job.handler

    @property
    def task(self) -> str | None:
        """The django.tasks task's module path of a task node, else None."""
        if self.job.handler != "django_task":
            return None
        return (self.job.payload or {}).get("task")

    @property
    def payload(self) -> dict:
        return self.job.payload

    @property
    def queue(self) -> str:
        return self.job.queue

    @property
    def priority(self) -> int:
        return self.job.priority

    @property
    def timeout_s(self) -> int:
        return self.job.timeout_s

    @property
    def max_attempts(self) -> int:
        return self.job.max_attempts


class WorkflowEdge(models.Model):
    """``downstream`` waits for ``upstream``'s run to succeed in the same workflow run."""

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="edges")
    upstream = models.ForeignKey(WorkflowNode, on_delete=models.CASCADE,
                                 related_name="downstream_edges")
    downstream = models.ForeignKey(WorkflowNode, on_delete=models.CASCADE,
                                   related_name="upstream_edges")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["upstream", "downstream"], name="workflow_edge"),
            models.CheckConstraint(condition=~Q(upstream=models.F("downstream")),
                                   name="workflow_edge_not_self"),
        ]

    def __str__(self) -> str:
        return f"{self.upstream_id} -> {self.downstream_id}"


class WorkflowRunState(models.TextChoices):
    RUNNING = "running"
    PAUSED = "paused"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


LIVE_WORKFLOW_STATES = (WorkflowRunState.RUNNING, WorkflowRunState.PAUSED)


class WorkflowRun(models.Model):
    """One run of a workflow at ``scheduled_at`` (UTC; the cron occurrence, or the
    database's now for a trigger). ``run_key`` (optional) makes a start through the API
    idempotent ("": none). ``started_by``: ``schedule``, ``trigger``, ``api`` or
    ``backfill``. ``error`` says why a failed run failed (the nodes that did not succeed)."""

    class StartedBy(models.TextChoices):
        SCHEDULE = "schedule"
        TRIGGER = "trigger"
        API = "api"
        BACKFILL = "backfill"  # docs/workflows.md, "Backfill"
        PARENT = "workflow"  # a parent's sub-workflow node, docs/workflows.md "Sub-workflows"

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="runs")
    scheduled_at = models.DateTimeField()
    run_key = models.CharField(max_length=RUN_KEY_MAX, blank=True, default="")
    state = models.CharField(max_length=16, choices=WorkflowRunState.choices,
                             default=WorkflowRunState.RUNNING)
    started_by = models.CharField(max_length=16, choices=StartedBy.choices,
                                  default=StartedBy.API)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workflow", "scheduled_at"],
                                    name="workflow_run_scheduled_at"),
            models.UniqueConstraint(fields=["workflow", "run_key"], name="workflow_run_key",
                                    condition=~Q(run_key="")),
        ]
        indexes = [
            models.Index(fields=["workflow"], name="workflow_run_live",
                         condition=Q(state__in=["running", "paused"])),
        ]

    def __str__(self) -> str:
        return (f"workflow run {self.pk} of {self.workflow_id} "
                f"at {self.scheduled_at:%Y-%m-%d %H:%M:%S}")


class NodeState(models.TextChoices):
    PENDING = "pending"  # waiting for its upstreams (or for a paused workflow run)
    RUNNING = "running"  # has a run that has not finished (scheduled ... retrying)
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # its run went to the dead letter
    CANCELLED = "cancelled"  # its run, or its workflow run, was cancelled
    UPSTREAM_FAILED = "upstream_failed"  # a failure means its rule cannot hold: won't run
    SKIPPED = "skipped"  # its rule cannot hold, and no failure decided it: won't run


DONE_NODE_STATES = (NodeState.SUCCEEDED, NodeState.FAILED, NodeState.CANCELLED,
                    NodeState.UPSTREAM_FAILED, NodeState.SKIPPED)
# What a workflow run that succeeds may end with: a skipped node is no failure.
FINE_NODE_STATES = (NodeState.SUCCEEDED, NodeState.SKIPPED)


class NodeRun(models.Model):
    """One node's state in one workflow run. ``run_id`` is its run (a runs_run id, no
    foreign key: module docstring), set with the state ``running``; ``ready_at`` is when
    its last upstream succeeded (database clock; the workflow run's start for a node
    without upstreams), ``finished_at`` when it reached a final state. ``error`` says why
    a node did not run (which upstream failed)."""

    workflow_run = models.ForeignKey(WorkflowRun, on_delete=models.CASCADE,
                                     related_name="node_runs")
    node = models.ForeignKey(WorkflowNode, on_delete=models.CASCADE, related_name="node_runs")
    state = models.CharField(max_length=16, choices=NodeState.choices,
                             default=NodeState.PENDING)
    # Unique (NULLs are distinct): a run belongs to one node run at most; the index also
    # serves the ack's lookup of which acked runs are nodes.
    run_id = models.BigIntegerField(null=True, blank=True, unique=True)
    ready_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    # A mapped node's run: how many items (MapItem rows) its fan-out made; None for a
    # plain node run, or a mapped one not yet fanned out. Such a node run runs with no
    # run_id of its own: its runs are its items'.
    items = models.PositiveIntegerField(null=True, blank=True)
    # A sub-workflow node's run: the workflow run it started (a plain id, as run_id:
    # history deletes either side on its own). Unique: one parent per child.
    child_run_id = models.BigIntegerField(null=True, blank=True, unique=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workflow_run", "node"], name="node_run_once"),
            models.CheckConstraint(condition=~Q(state="running") | Q(run_id__isnull=False)
                                   | Q(items__isnull=False) | Q(child_run_id__isnull=False),
                                   name="node_run_running_has_run"),
        ]
        indexes = [
            # The live node runs of a workflow run: whether it is done, what to reconcile.
            models.Index(fields=["workflow_run", "state"], name="node_run_live",
                         condition=Q(state__in=["pending", "running"])),
        ]
        ordering = ["workflow_run", "id"]

    def __str__(self) -> str:
        return f"node {self.node_id} of workflow run {self.workflow_run_id}: {self.state}"


class MapItem(models.Model):
    """One item of a mapped node run (docs/workflows.md, "Mapped nodes"): its ``index``
    in the upstream's result list, the ``item`` itself (JSON), its run (``run_id``, a
    runs_run id without foreign key, as NodeRun's) and that run's outcome in ``state``
    (a NodeState: running, succeeded, failed or cancelled). UNIQUE (node_run, index) and
    UNIQUE (run_id) make each item one run, however often a fan-out is attempted."""

    node_run = models.ForeignKey(NodeRun, on_delete=models.CASCADE, related_name="map_items")
    index = models.PositiveIntegerField()
    item = models.JSONField(null=True, blank=True)
    run_id = models.BigIntegerField(unique=True)
    state = models.CharField(max_length=16, choices=NodeState.choices,
                             default=NodeState.RUNNING)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["node_run", "index"], name="map_item_once"),
        ]
        ordering = ["node_run", "index"]

    def __str__(self) -> str:
        return f"item {self.index} of node run {self.node_run_id}: {self.state}"


class WorkflowBackfill(BackfillBase):
    """A backfill of one cron workflow (docs/workflows.md, "Backfill"): its workflow
    runs have ``started_by`` backfill and ``run_key`` ``backfill:<this id>:<occurrence>``."""

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="backfills")

    def __str__(self) -> str:
        return f"backfill {self.pk} of workflow {self.workflow_id}"
