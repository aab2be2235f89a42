"""POST /api/workflows/{id}/backfill/ (docs/api.md, "Backfill"): a workflow run for each
past occurrence of a cron workflow in ``[start, end)`` that has none
(workflows/backfill.py). The view is the workflow viewset's, so owner isolation is a
trigger's: another owner's workflow answers 404, or 403 naming
``workflows.change_workflow``. Body and answer as the jobs' (jobs/api/backfill.py).
"""

from jobs.api.backfill import backfill_schema, run_backfill
from workflows.api.views import WorkflowViewSet
from workflows.backfill import backfill_workflow


class WorkflowBackfillViewSet(WorkflowViewSet):
    """The workflow viewset with one more verb, routed at /api/workflows/{id}/backfill/."""

    @backfill_schema("workflow")
    def backfill(self, request, pk=None):
        workflow = self.get_object()
        return run_backfill(request, workflow.pk, backfill_workflow)
