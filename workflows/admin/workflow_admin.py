"""The workflows in the admin (docs/admin.md, "Workflows"): workflows and workflow runs,
read-only, each page with its graph drawn (workflows/admin/graph_svg.py: inline SVG, nodes
coloured by state, edges as arrows, each node linked to its run's page).

As for runs (runs/admin/run_admin.py), nothing is edited through a form: actions call the service
functions the REST API calls (workflows/control.py, workflows/services.py) and report
counts. Viewing needs the model's view permission; the actions need
``workflows.change_workflow`` (pause, resume, trigger a workflow) or
``workflows.change_workflowrun`` (cancel, pause, resume a workflow run).
"""

from django.contrib import admin, messages
from django.contrib.admin.options import ActionLocation
from django.db.models import Count, OuterRef, Q, Subquery
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from jobs.tenants import QuotaExceeded
from runs.admin.cells import cut
from runs.admin.helpers import (
    ReadOnlyAdmin,
    confirm_then,
    format_duration,
    report_count,
    stamp,
    timestamp_column,
)
from runs.execution import hooks
from runs.models import Run
from scheduler_core.exceptions import InvalidJob, SchedulerError
from workflows import control, services
from workflows.admin.backfill import backfill_workflows
from workflows.admin.graph_svg import Node, draw
from workflows.execution import rules
from workflows.models import NodeRun, NodeState, Workflow, WorkflowEdge, WorkflowRun

BOTH = [ActionLocation.CHANGE_LIST, ActionLocation.CHANGE_FORM]
RECENT_RUNS = 10
TRIGGER_MAX = 100


def _kind(map_over, subworkflow) -> str:
    """graph_svg.Node's ``kind`` of a node with ``map_over`` and ``subworkflow`` (ids or
    names, None when not)."""
    return "map" if map_over is not None else "workflow" if subworkflow is not None else ""


def shown_rule(rule: str) -> str:
    """A node's trigger rule as the graph shows it: "" for the default (all_success)."""
    return "" if rule == rules.DEFAULT else rule


def _state_badge(state: str):
    return format_html('<span class="wf-state wf-state-{}">{}</span>', state, state)


@admin.register(Workflow)
class WorkflowAdmin(ReadOnlyAdmin):
    """Workflows: their schedule, status and graph; pause, resume and trigger."""

    list_display = ("id", "name_cell", "owner", "status_display", "schedule_display", "node_count",
                    "next_run", "created")
    list_display_links = ("id", "name_cell")
    list_filter = ("status",)
    search_fields = ("=id", "name", "owner__username")
    search_help_text = "Workflow id, name, owner's username."
    list_select_related = ("owner", "schedule")
    ordering = ("-id",)
    actions = ["pause_workflows", "resume_workflows", "trigger_workflows", "cancel_workflows",
               backfill_workflows]
    fields = (("name", "owner"), ("status_display", "paused"), ("schedule_display",
              "next_run"), "created", "graph", "nodes_table", "recent_runs")
    readonly_fields = fields[0] + fields[1] + fields[2] + (
        "created", "graph", "nodes_table", "recent_runs")

    class Media:
        css = {"all": ["runs/admin.css", "workflows/admin.css"]}

    @admin.display(description="next run", ordering="next_run_at")
    def next_run(self, workflow):
        # A paused or cancelled workflow starts nothing: its stored time is stale.
        return stamp(workflow.next_run_at) if workflow.status == "active" else "-"

    @admin.display(description="name", ordering="name")
    def name_cell(self, workflow):
        return cut(workflow.name)  # whole on hover: a row fits 1280 px
    paused = timestamp_column("paused_at", "paused at")
    created = timestamp_column("created_at", "created")

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(node_count=Count("nodes"))

    def has_operate_permission(self, request) -> bool:
        return request.user.has_perm("workflows.change_workflow")

    @admin.display(description="status", ordering="status")
    def status_display(self, workflow):
        return _state_badge(workflow.status)

    @admin.display(description="schedule")
    def schedule_display(self, workflow):
        if workflow.schedule is None:
            return "- (trigger only)"
        sched = workflow.schedule
        return f"{sched.cron} ({sched.timezone})"

    @admin.display(description="nodes", ordering="node_count")
    def node_count(self, workflow):
        return workflow.node_count

    @admin.display(description="graph")
    def graph(self, workflow):
        nodes = list(workflow.nodes.select_related("job", "subworkflow").order_by("id"))
        pairs = list(WorkflowEdge.objects.filter(workflow=workflow)
                     .values_list("upstream_id", "downstream_id"))
        boxes = [Node(n.pk, n.name, note=n.task or n.handler,
                      url=reverse("admin:jobs_job_change", args=[n.job_id]),
                      rule=shown_rule(n.trigger_rule), kind=_kind(n.map_over_id,
                                                                   n.subworkflow_id))
                 for n in nodes]
        for box, n in zip(boxes, nodes, strict=True):
            if n.subworkflow is not None:  # its workflow, not its job that never runs
                box.note = f"workflow {n.subworkflow.name}"
                box.url = reverse("admin:workflows_workflow_change", args=[n.subworkflow_id])
        return format_html('<div class="wf-graph">{}</div>', draw(boxes, pairs, legend=False))

    @admin.display(description="nodes")
    def nodes_table(self, workflow):
        nodes = workflow.nodes.select_related("job", "subworkflow").order_by("id")
        return render_to_string("admin/workflows/nodes.html", {"nodes": nodes})

    @admin.display(description="recent runs")
    def recent_runs(self, workflow):
        runs = list(workflow.runs.order_by("-scheduled_at", "-id")[:RECENT_RUNS])
        if not runs:
            return "none yet"
        items = format_html_join("", '<li><a href="{}">{}</a> {} {}</li>', (
            (reverse("admin:workflows_workflowrun_change", args=[r.pk]), f"#{r.pk}",
             _state_badge(r.state), stamp(r.scheduled_at)) for r in runs))
        more = (reverse("admin:workflows_workflowrun_changelist")
                + f"?q={workflow.pk}")
        return format_html('<ul class="wf-runs">{}</ul><a href="{}">all runs</a>', items, more)

    @admin.action(description="Pause selected workflows (their schedules)",
                  permissions=["operate"], location=BOTH)
    def pause_workflows(self, request, queryset):
        ids = list(queryset.values_list("pk", flat=True))
        done = sum(control.pause_workflow(pk) for pk in ids)
        report_count(self, request, done, len(ids), "paused",
                     "only active workflows can be paused")

    @admin.action(description="Resume selected workflows (from the next occurrence)",
                  permissions=["operate"], location=BOTH)
    def resume_workflows(self, request, queryset):
        ids, done = list(queryset.values_list("pk", flat=True)), 0
        for pk in ids:
            try:
                done += control.resume_workflow(pk)
            except InvalidJob as exc:  # a stored schedule that no longer reads
                self.message_user(request, f"Workflow {pk} was not resumed: {exc}",
                                  messages.ERROR)
        report_count(self, request, done, len(ids), "resumed",
                     "only paused workflows can be resumed")

    @admin.action(description="Cancel selected workflows for good (their runs and node jobs)",
                  permissions=["operate"], location=BOTH)
    def cancel_workflows(self, request, queryset):
        return confirm_then(
            self, request, queryset, verb="cancel", done="cancelled",
            explanation="They start no run again; their running and paused workflow runs are "
                        "cancelled, and their node jobs, which then no longer count against "
                        "their owner's max_jobs. Their history stays.",
            apply=lambda ids: sum(control.cancel_workflow(pk) for pk in ids),
            skipped_reason="they were cancelled already",
            describe=lambda wf: wf.status)

    @admin.action(description="Trigger selected workflows now (one workflow run each)",
                  permissions=["operate"], location=BOTH)
    def trigger_workflows(self, request, queryset):
        ids = list(queryset.values_list("pk", flat=True)[:TRIGGER_MAX + 1])
        if len(ids) > TRIGGER_MAX:
            self.message_user(request, f"Trigger at most {TRIGGER_MAX} workflows at a time; "
                                       "nothing was triggered.", messages.ERROR)
            return
        started = []
        for pk in ids:
            try:
                started.append(services.trigger(pk))
            except (SchedulerError, QuotaExceeded):
                continue  # paused, or over the owner's quota: counted as left alone
        report_count(self, request, len(started), len(ids), "triggered",
                     "only active workflows within their owner's max_pending can be triggered")
        if len(started) == 1:
            url = reverse("admin:workflows_workflowrun_change", args=[started[0].pk])
            self.message_user(request, format_html('Workflow run <a href="{}">{}</a> started.',
                                                   url, started[0].pk), messages.INFO)


@admin.register(WorkflowRun)
class WorkflowRunAdmin(ReadOnlyAdmin):
    """Workflow runs: their nodes' states with the graph drawn; cancel, pause, resume."""

    action_noun = ("workflow run", "workflow runs")
    list_display = ("id", "workflow_link", "state_display", "scheduled", "started_by",
                    "progress", "finished", "took")
    list_display_links = ("id",)
    list_filter = ("state", "started_by")
    search_fields = ("=id", "=workflow__id", "workflow__name", "run_key")
    search_help_text = "Workflow run id, workflow id or name, run key."
    list_select_related = ("workflow",)
    ordering = ("-scheduled_at", "-id")
    show_full_result_count = False
    actions = ["cancel_workflow_runs", "pause_workflow_runs", "resume_workflow_runs"]
    fields = (("workflow_link", "state_display"), ("scheduled", "started_by", "run_key"),
              ("created", "finished", "took"), "parent", "error", "graph", "nodes_table")
    readonly_fields = fields[0] + fields[1] + fields[2] + ("parent", "error", "graph",
                                                           "nodes_table")

    class Media:
        css = {"all": ["runs/admin.css", "workflows/admin.css"]}

    scheduled = timestamp_column("scheduled_at", "scheduled")
    created = timestamp_column("created_at", "started")
    finished = timestamp_column("finished_at", "finished")

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(
            node_total=Count("node_runs"),
            node_done=Count("node_runs", filter=Q(node_runs__state=NodeState.SUCCEEDED)))

    def has_operate_permission(self, request) -> bool:
        return request.user.has_perm("workflows.change_workflowrun")

    @admin.display(description="started by the node")
    def parent(self, wr):
        """The sub-workflow node whose run this is (docs/workflows.md, "Sub-workflows")."""
        found = (NodeRun.objects.filter(child_run_id=wr.pk)
                 .values_list("workflow_run_id", "node__name").first())
        if found is None:
            return "-"
        url = reverse("admin:workflows_workflowrun_change", args=[found[0]])
        return format_html('<a href="{}">{} of workflow run #{}</a>', url, found[1], found[0])

    @admin.display(description="workflow", ordering="workflow__name")
    def workflow_link(self, wr):
        url = reverse("admin:workflows_workflow_change", args=[wr.workflow_id])
        return format_html('<a href="{}">{}</a> <span class="quiet">#{}</span>', url,
                           cut(wr.workflow.name), wr.workflow_id)

    @admin.display(description="state", ordering="state")
    def state_display(self, wr):
        return _state_badge(wr.state)

    @admin.display(description="nodes succeeded")
    def progress(self, wr):
        return f"{wr.node_done} / {wr.node_total}"

    @admin.display(description="took")
    def took(self, wr):
        return format_duration(wr.finished_at - wr.created_at) if wr.finished_at else "-"

    @admin.display(description="graph")
    def graph(self, wr):
        view = services.get_workflow_run(wr.pk)
        ids = dict(NodeRun.objects.filter(workflow_run=wr).values_list("node__name", "node_id"))
        pairs = list(WorkflowEdge.objects.filter(workflow_id=wr.workflow_id)
                     .values_list("upstream_id", "downstream_id"))
        boxes = []
        for n in view["nodes"]:
            note = n["state"]
            if n["run_id"]:
                note = f"{n['state']} · attempt {n['attempt']}/{n['max_attempts']}"
            elif n["items"] is not None:  # a mapped node, collapsed: its items' counts
                note = f"{n['state']} · {n['items'].get('succeeded', 0)}/" \
                       f"{n['items']['total']} items"
            url = reverse("admin:runs_run_change", args=[n["run_id"]]) if n["run_id"] else ""
            if n["child"]:  # a sub-workflow node: its child run's nodes, and a link to it
                child = n["child"]
                note = f"{n['state']} · {child['nodes'].get('succeeded', 0)}/" \
                       f"{sum(child['nodes'].values())} nodes"
                url = reverse("admin:workflows_workflowrun_change", args=[child["id"]])
            boxes.append(Node(ids[n["name"]], n["name"], n["state"], note, url,
                              shown_rule(n["trigger_rule"]),
                              _kind(n["map"], n["workflow"])))
        return format_html('<div class="wf-graph">{}</div>', draw(boxes, pairs))

    @admin.display(description="nodes")
    def nodes_table(self, wr):
        view = services.get_workflow_run(wr.pk)
        for n in view["nodes"]:
            n["run_url"] = (reverse("admin:runs_run_change", args=[n["run_id"]])
                            if n["run_id"] else "")
            n["child_url"] = (reverse("admin:workflows_workflowrun_change",
                                      args=[n["child"]["id"]]) if n["child"] else "")
            n["waited"] = (format_duration(n["first_started_at"] - n["ready_at"])
                           if n["first_started_at"] and n["ready_at"] else "-")
            for key in ("ready_at", "first_started_at", "finished_at"):
                n[f"{key}_text"] = stamp(n[key], precise=True) if n[key] else "-"
        return render_to_string("admin/workflows/node_runs.html", {"nodes": view["nodes"]})

    @admin.action(description="Cancel selected workflow runs (pending nodes never run)",
                  permissions=["operate"], location=BOTH)
    def cancel_workflow_runs(self, request, queryset):
        return confirm_then(
            self, request, queryset, verb="cancel", done="cancelled",
            explanation="Their pending nodes become cancelled without running and the runs "
                        "of their running nodes are cancelled (a handler executing is "
                        "stopped).",
            apply=lambda ids: sum(control.cancel_workflow_run(pk) for pk in ids),
            skipped_reason="only running or paused workflow runs can be cancelled",
            describe=lambda wr: wr.state)

    @admin.action(description="Pause selected workflow runs (no new node starts)",
                  permissions=["operate"], location=BOTH)
    def pause_workflow_runs(self, request, queryset):
        ids = list(queryset.values_list("pk", flat=True))
        report_count(self, request, sum(control.pause_workflow_run(pk) for pk in ids),
                     len(ids), "paused", "only running workflow runs can be paused")

    @admin.action(description="Resume selected workflow runs", permissions=["operate"],
                  location=BOTH)
    def resume_workflow_runs(self, request, queryset):
        ids = list(queryset.values_list("pk", flat=True))
        report_count(self, request, sum(control.resume_workflow_run(pk) for pk in ids),
                     len(ids), "resumed", "only paused workflow runs can be resumed")


def _annotate_holder(runs):
    """Runs with ``held_workflow_run``: the workflow run a run is a node's run in
    (runs/execution/hooks.py's provide_holder; the node is its job, named workflow/node)."""
    node_run = NodeRun.objects.filter(run_id=OuterRef("pk"))
    return runs.annotate(held_workflow_run=Subquery(node_run.values("workflow_run_id")[:1]))


def _describe_holder(run: Run) -> list[tuple[str, str]]:
    wr_id = getattr(run, "held_workflow_run", None)
    if wr_id is None:
        return []
    return [(f"workflow run {wr_id}", reverse("admin:workflows_workflowrun_change",
                                              args=[wr_id]))]


hooks.provide_holder(_annotate_holder, _describe_holder)
