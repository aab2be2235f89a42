"""Serializers of the workflows REST API (docs/api.md, "Workflows"): a workflow to create,
a workflow as shown, a start (trigger) and a workflow run with its nodes.

As for jobs (jobs/api/serializers.py), these only parse and type-check; the rules of a
workflow (the graph, each node's job fields, the owner's bounds) are the service layer's
(workflows/validation.py), which names the bad field by its path (``nodes[3].queue``,
``edges[7]``, ``edges`` for a cycle).
"""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from jobs.api.json_fields import AwareDateTimeField, TextField
from jobs.api.serializers import NextRunField, PayloadField, StrictFieldsMixin
from workflows.models import RUN_KEY_MAX, NodeState, Workflow, WorkflowRun, WorkflowRunState
from workflows.validation import NAME_MAX


class WorkflowCreateSerializer(StrictFieldsMixin, serializers.Serializer):
    """POST /api/workflows/: the whole graph in one request. ``nodes`` and ``edges`` are
    passed to workflows.services.create_workflow as they are (their shapes:
    docs/workflows.md, "Validation")."""

    name = TextField(max_length=NAME_MAX)
    nodes = serializers.ListField(
        child=serializers.JSONField(), allow_empty=False,
        help_text="the nodes: {name, handler | task, payload (handler nodes), args and "
                  "kwargs (task nodes), queue, priority, timeout_s, max_attempts, "
                  "trigger_rule (all_success (default), all_done, all_failed, one_success, "
                  "one_failed, none_failed), map (an upstream node's name: run once per "
                  "item of its result list)} or {name, workflow (an id or name of the "
                  "owner's workflow: start a run of it), trigger_rule, queue}; at most "
                  "WORKFLOW_MAX_NODES (1,000)")
    edges = serializers.ListField(
        child=serializers.JSONField(), required=False, default=list,
        help_text='[upstream, downstream] pairs or {"from": upstream, "to": downstream} '
                  "objects naming nodes; the downstream waits for the upstream's success; at "
                  "most WORKFLOW_MAX_EDGES (5,000)")
    schedule = serializers.JSONField(
        required=False, allow_null=True, default=None,
        help_text="a cron expression, or {cron, timezone, misfire_policy, max_lag_s, "
                  "jitter_s} (docs/cron.md): a workflow run starts at each occurrence")

    # A job's schedule fields sit at its top level; a workflow's inside ``schedule``.
    SCHEDULE_FIELDS = frozenset({"cron", "timezone", "misfire_policy", "max_lag_s",
                                 "jitter_s", "cron_expr", "timezone_name", "cron_timezone"})

    def unknown_reason(self, name: str) -> str:
        if name in self.SCHEDULE_FIELDS:
            return (f"unknown field (a workflow's {name!r} goes inside 'schedule': "
                    '{"schedule": {"cron": "0 2 * * *", "timezone": "Europe/Berlin"}})')
        return super().unknown_reason(name)


class WorkflowNodeSerializer(serializers.Serializer):
    """A node as shown: its name and its job's fields (``job`` is the job's id)."""

    name = serializers.CharField()
    job = serializers.IntegerField(source="job_id")
    handler = serializers.CharField()
    task = serializers.CharField(allow_null=True)
    payload = PayloadField(source="*", read_only=True)  # an http node's secrets redacted
    queue = serializers.CharField()
    priority = serializers.IntegerField()
    timeout_s = serializers.IntegerField()
    max_attempts = serializers.IntegerField()
    trigger_rule = serializers.CharField(
        help_text="when it runs, by its upstreams' states (docs/workflows.md, "
                  "\"Trigger rules\")")
    upstream = serializers.SerializerMethodField(
        help_text="the names of the nodes this one waits for")
    map = serializers.SerializerMethodField(
        help_text="a mapped node's upstream, whose result list it runs once per item of "
                  "(docs/workflows.md, \"Mapped nodes\"); null for a plain node")

    workflow = serializers.IntegerField(
        source="subworkflow_id", allow_null=True,
        help_text="a sub-workflow node's workflow id, a run of which it starts "
                  "(docs/workflows.md, \"Sub-workflows\"); null for any other node")

    def get_upstream(self, node) -> list[str]:
        return self.context["upstream"].get(node.pk, [])

    def get_map(self, node) -> str | None:
        return node.map_over.name if node.map_over_id else None


class ScheduleSerializer(serializers.Serializer):
    cron = serializers.CharField()
    timezone = serializers.CharField()
    misfire_policy = serializers.CharField()
    max_lag_s = serializers.IntegerField()
    jitter_s = serializers.IntegerField()


class WorkflowSerializer(serializers.ModelSerializer):
    """A workflow with its graph: ``nodes`` in creation order, ``edges`` as
    [upstream, downstream] name pairs. ``next_run_at`` (UTC) is the next occurrence of
    its schedule, null without one and while the workflow is paused or cancelled."""

    owner = serializers.CharField(source="owner.username", allow_null=True, default=None)
    schedule = ScheduleSerializer(allow_null=True)
    next_run_at = NextRunField(read_only=True, allow_null=True)
    nodes = serializers.SerializerMethodField()
    edges = serializers.SerializerMethodField()

    class Meta:
        model = Workflow
        fields = ["id", "name", "owner", "status", "schedule", "next_run_at", "paused_at",
                  "created_at", "updated_at", "nodes", "edges"]

    def _graph(self, workflow):
        cached = getattr(workflow, "_graph_shown", None)
        if cached is not None:
            return cached
        nodes = list(workflow.nodes.all())
        names = {node.pk: node.name for node in nodes}
        pairs = sorted(((names[e.upstream_id], names[e.downstream_id])
                        for e in workflow.edges.all()), key=lambda p: p)
        upstream: dict[int, list[str]] = {}
        for edge in workflow.edges.all():
            upstream.setdefault(edge.downstream_id, []).append(names[edge.upstream_id])
        workflow._graph_shown = (nodes, pairs, {k: sorted(v) for k, v in upstream.items()})
        return workflow._graph_shown

    @extend_schema_field(WorkflowNodeSerializer(many=True))
    def get_nodes(self, workflow) -> list[dict]:
        nodes, _, upstream = self._graph(workflow)
        return WorkflowNodeSerializer(nodes, many=True, context={"upstream": upstream}).data

    def get_edges(self, workflow) -> list[list[str]]:
        return [list(pair) for pair in self._graph(workflow)[1]]


class WorkflowSummarySerializer(serializers.ModelSerializer):
    """A workflow in a list: no graph (``node_count`` says its size; GET the workflow for
    its nodes and edges)."""

    owner = serializers.CharField(source="owner.username", allow_null=True, default=None)
    schedule = ScheduleSerializer(allow_null=True)
    next_run_at = NextRunField(read_only=True, allow_null=True)
    node_count = serializers.IntegerField()

    class Meta:
        model = Workflow
        fields = ["id", "name", "owner", "status", "schedule", "next_run_at", "paused_at",
                  "created_at", "updated_at", "node_count"]


class StartSerializer(StrictFieldsMixin, serializers.Serializer):
    """The optional body of POST /api/workflows/{id}/trigger/: with neither field a run
    starts now (``started_by`` trigger); ``run_key`` makes the start idempotent and
    ``scheduled_at`` holds its first runs until then (``started_by`` api)."""

    run_key = TextField(required=False, max_length=RUN_KEY_MAX, help_text=(
        "a second start with the same key answers the workflow run it started (200) "
        "instead of starting another"))
    scheduled_at = AwareDateTimeField(required=False, help_text=(
        "when the run is for (ISO 8601 with an offset; default now); one run per "
        "scheduled_at"))


class WorkflowRunSerializer(serializers.ModelSerializer):
    """A workflow run as listed: its state and times (UTC), without its nodes."""

    state = serializers.ChoiceField(choices=WorkflowRunState.choices)

    class Meta:
        model = WorkflowRun
        fields = ["id", "workflow", "scheduled_at", "run_key", "state", "started_by",
                  "created_at", "finished_at", "error"]


class NodeRunSerializer(serializers.Serializer):
    """One node in one workflow run: its state, its run (``run_id``, null until it is
    made, GET /api/runs/{run_id}/ for its attempts and logs), the run's ``attempt`` count
    and ``max_attempts``, ``ready_at`` (when its last upstream succeeded, or the workflow
    run's start for a node without upstreams), ``first_started_at`` (its first attempt's
    start), ``started_at`` (the current or last attempt's), ``finished_at``, and
    ``error`` (why it did not run: which upstream failed), ``trigger_rule`` (its node's),
    ``items`` (a mapped node's items by state), ``workflow`` and ``child`` (a
    sub-workflow node's workflow id and its child run's id, state and nodes by state)."""

    name = serializers.CharField()
    state = serializers.ChoiceField(choices=NodeState.choices)
    trigger_rule = serializers.CharField()
    upstream = serializers.ListField(child=serializers.CharField())
    run_id = serializers.IntegerField(allow_null=True)
    run_state = serializers.CharField(allow_null=True)
    attempt = serializers.IntegerField()
    max_attempts = serializers.IntegerField(allow_null=True)
    ready_at = serializers.DateTimeField(allow_null=True)
    first_started_at = serializers.DateTimeField(allow_null=True)
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    error = serializers.CharField(allow_blank=True)
    items = serializers.DictField(
        child=serializers.IntegerField(), allow_null=True,
        help_text="a mapped node's items: total and by state; null for a plain node")
    workflow = serializers.IntegerField(
        allow_null=True, help_text="a sub-workflow node's workflow id; else null")
    child = serializers.JSONField(
        allow_null=True, help_text="a sub-workflow node's child run once started: {id, "
                                   "state, nodes (its node runs by state)}; else null")


class WorkflowRunDetailSerializer(serializers.Serializer):
    """A workflow run with every node (workflows.services.get_workflow_run's data)."""

    id = serializers.IntegerField()
    workflow = serializers.IntegerField()
    scheduled_at = serializers.DateTimeField()
    run_key = serializers.CharField(allow_blank=True)
    state = serializers.ChoiceField(choices=WorkflowRunState.choices)
    started_by = serializers.ChoiceField(choices=WorkflowRun.StartedBy.choices)
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    error = serializers.CharField(allow_blank=True)
    parent = serializers.JSONField(
        allow_null=True, help_text="the {workflow_run, node} whose sub-workflow node "
                                   "started this run; null for a run started otherwise")
    nodes = NodeRunSerializer(many=True)
