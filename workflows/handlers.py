"""The workflows app's one handler: the job of a sub-workflow node (docs/workflows.md,
"Sub-workflows"), which the engine never runs (the node starts a workflow run instead)."""

from scheduler_core.registry import handler
from workflows.validation import SUBWORKFLOW_HANDLER


@handler(SUBWORKFLOW_HANDLER, internal=True)
def subworkflow(ctx, payload):
    """Never run: a sub-workflow node's job has no runs (workflows/execution/subflows.py). Raises
    RuntimeError (a run made by hand goes to the dead letter, saying so)."""
    raise RuntimeError("this is a sub-workflow node's job: its node starts a workflow run "
                       "and its job never runs")
