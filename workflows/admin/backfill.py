"""The admin's workflow backfill (docs/admin.md, "Backfill"): the workflow list's action
(the jobs' range page and rules, jobs/admin/backfill.py; workflow_admin.py lists it) and
the list of workflow backfills with their progress (registered on import)."""

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from jobs.admin.backfill import BOTH, BackfillAdminBase, backfill_action
from workflows.backfill import backfill_workflow, finished_count
from workflows.models import WorkflowBackfill


@admin.action(description="Backfill selected cron workflows over a past range…",
              permissions=["operate"], location=BOTH)
def backfill_workflows(modeladmin, request, queryset):
    """The workflow list's action: a workflow run per past occurrence without one."""
    return backfill_action(modeladmin, request, queryset, backfill=backfill_workflow,
                           noun="workflow",
                           list_url=reverse("admin:workflows_workflowbackfill_changelist"))


@admin.register(WorkflowBackfill)
class WorkflowBackfillAdmin(BackfillAdminBase):
    """Backfills of cron workflows (workflows/backfill.py)."""

    list_display = ("id", "workflow_link", *BackfillAdminBase.list_display_common)
    list_select_related = ("workflow", "requested_by")
    search_fields = ("=workflow__id", "workflow__name")
    search_help_text = "Workflow id or name."
    finished_counter = staticmethod(finished_count)

    @admin.display(description="workflow", ordering="workflow_id")
    def workflow_link(self, record):
        return format_html('<a href="{}">{}</a>', reverse(
            "admin:workflows_workflow_change", args=[record.workflow_id]), record.workflow)
