"""The trace context of a workflow's runs (docs/tracing.md, "Workflows").

The runs a workflow run starts with (its nodes without upstreams) store the context
current at its start (workflows/engine.py, _make_runs): a request's span, say. The runs of
the nodes after them, and of a mapped node's items, are made by acks, often in one SQL
statement (workflows/sql/ack_succeeded.sql), where no span is current: a worker leasing
one with tracing on finds the context of its workflow run here (runs/tracing.py,
SOURCES), so every node's attempts are in the trace of the start.
"""

from runs.models import Run
from workflows.models import MapItem, NodeRun


def contexts(run_ids: list[int], using: str) -> dict[int, str]:
    """The trace context (a W3C traceparent) of each of ``run_ids`` (runs without one of
    their own) that is a workflow node's run or a mapped item's: the context of the
    first run of its workflow run that stores one; ``using`` the database alias. Runs of
    no workflow, or of a workflow run started with no span current, are left out. Four
    queries at most, only while tracing is on."""
    nodes = NodeRun.objects.using(using)
    workflow_run_of = dict(nodes.filter(run_id__in=run_ids)
                           .values_list("run_id", "workflow_run_id"))
    workflow_run_of.update(MapItem.objects.using(using).filter(run_id__in=run_ids)
                           .values_list("run_id", "node_run__workflow_run_id"))
    if not workflow_run_of:
        return {}
    siblings = dict(nodes.filter(workflow_run_id__in=set(workflow_run_of.values()),
                                 run_id__isnull=False).values_list("run_id", "workflow_run_id"))
    context_of: dict[int, str] = {}
    for run_id, context in (Run.objects.using(using)
                            .filter(pk__in=list(siblings), trace_context__isnull=False)
                            .order_by("pk").values_list("pk", "trace_context")):
        context_of.setdefault(siblings[run_id], context)
    return {run_id: context_of[wr] for run_id, wr in workflow_run_of.items()
            if wr in context_of}
