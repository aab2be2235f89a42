"""The workflows side of the admin console (docs/admin.md, "Workflows" and "Backfill"):
the workflow and workflow run pages (workflow_admin, each with its graph drawn by
graph_svg) and the workflow backfills' page (backfill). Importing this package registers
them all."""

from workflows.admin import backfill, workflow_admin

__all__ = ["backfill", "workflow_admin"]
