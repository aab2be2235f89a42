"""The trace context of a workflow's runs (docs/tracing.md, "Workflows").

The runs a workflow run starts with (its nodes without upstreams) store the context
current at its start (workflows/execution/engine.py, _make_runs): a request's span, say. The runs
an ack makes (the nodes below the acked ones, a mapped node's items, a sub-workflow's
child runs) store the traceparent of the span of the upstream whose ack made them
(released: the worker's ack span, or the attempt's when the child acks itself), so the
nodes' spans are a chain, as the graph is; the one-call ack does the same in SQL
(workflows/sql/ack_succeeded.sql). A run still made with none (by a reconcile, a resume,
an ack with tracing off) finds, at its lease with tracing on, the context of its workflow
run (contexts: runs/tracing.py, SOURCES).
"""

from django.db import connections

from runs import tracing
from runs.models import Run
from workflows.models import MapItem, NodeRun, WorkflowEdge


def released(node_run_ids: list[int], using: str) -> dict[int, str]:
    """{node run id: traceparent} for each of ``node_run_ids`` (node runs an ack is
    starting) one of whose upstream node runs' run, or mapped item's run, that ack acks
    with a span (runs/tracing.py, releasing_now): that span, the lowest such run id's in
    a join whose upstreams are acked together; ``using`` the database alias. No query,
    and {}, outside a traced ack."""
    spans = tracing.releasing_now()
    if not spans or not node_run_ids:
        return {}
    node, edge, item = (NodeRun._meta.db_table, WorkflowEdge._meta.db_table,
                        MapItem._meta.db_table)
    ids = ", ".join(["%s"] * len(node_run_ids))
    runs = ", ".join(["%s"] * len(spans))
    # An upstream node run's own run, or one of its items (a mapped node's last item).
    sql = (f"SELECT n.id, COALESCE(m.run_id, u.run_id) AS acked FROM {node} AS n"
           f" JOIN {edge} AS e ON e.downstream_id = n.node_id"
           f" JOIN {node} AS u ON u.workflow_run_id = n.workflow_run_id"
           " AND u.node_id = e.upstream_id"
           f" LEFT JOIN {item} AS m ON m.node_run_id = u.id AND m.run_id IN ({runs})"
           f" WHERE n.id IN ({ids}) AND (u.run_id IN ({runs}) OR m.run_id IS NOT NULL)"
           " ORDER BY acked")
    found: dict[int, str] = {}
    with connections[using].cursor() as cursor:
        cursor.execute(sql, [*spans, *node_run_ids, *spans])
        for node_run_id, run_id in cursor.fetchall():
            found.setdefault(node_run_id, spans[run_id])
    return found


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
