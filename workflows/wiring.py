"""What WorkflowsConfig.ready connects (docs/workflows.md, "Where the engine hooks in"):
the run listener (runs/execution/hooks.py), the jobs and runs the history retention keeps (each
node's job; the runs of a workflow run that can still start a node), ``ctx.upstream``,
the scheduler's tick (cron workflow runs and the reconcile), the jobs' write guard on the
nodes' jobs (jobs/guards.py) and the workflows' families on /metrics
(workflows/metrics.py), and the trace context of its runs (workflows/execution/tracing.py)."""

from jobs import guards
from jobs.schedules.scheduler import scheduler_tick
from runs import tracing
from runs.execution import hooks
from runs.metrics.endpoint import registry
from workflows.context import ctx_map_item, ctx_upstream
from workflows.execution.listener import LISTENER
from workflows.execution.node_job_guard import describe_node_jobs
from workflows.execution.subflows import register as register_subflows
from workflows.execution.tracing import contexts
from workflows.metrics import COLLECTOR
from workflows.models import MapItem, NodeRun, WorkflowNode, WorkflowRun
from workflows.ticks import on_scheduler_tick

# The runs of the nodes of a workflow run that may still start a node, whose results a
# downstream node reads (docs/workflows.md, "Results"): running or paused, a child of
# one ("Sub-workflows"), or failed with a dead run of one of its nodes still in the dead
# letter (a requeue resumes it).
KEPT_RUNS = (
    f"SELECT kn.run_id FROM {NodeRun._meta.db_table} kn "
    f"JOIN {WorkflowRun._meta.db_table} kw ON kw.id = kn.workflow_run_id "
    "WHERE kn.run_id IS NOT NULL AND (kw.state IN ('running', 'paused') "
    # a child whose parent still runs: its leaves' results are the parent node's
    f"OR kw.id IN (SELECT pn.child_run_id FROM {NodeRun._meta.db_table} pn "
    f"JOIN {WorkflowRun._meta.db_table} pw ON pw.id = pn.workflow_run_id "
    "WHERE pw.state IN ('running', 'paused')) "
    "OR (kw.state = 'failed' AND EXISTS (SELECT 1 "
    f"FROM {NodeRun._meta.db_table} kf JOIN {{runs}} kr ON kr.id = kf.run_id "
    "WHERE kf.workflow_run_id = kw.id AND kr.state = 'dead')))")

# A mapped node's item runs, kept as long as a plain node's (docs/workflows.md).
KEPT_ITEM_RUNS = (
    f"SELECT ki.run_id FROM {MapItem._meta.db_table} ki "
    f"JOIN {NodeRun._meta.db_table} kn ON kn.id = ki.node_run_id "
    f"JOIN {WorkflowRun._meta.db_table} kw ON kw.id = kn.workflow_run_id "
    "WHERE kw.state IN ('running', 'paused', 'failed')")


def connect() -> None:
    register_subflows()  # the engine's sub-workflow steps (workflows/execution/nesting.py)
    hooks.register(LISTENER)
    hooks.keep_jobs(WorkflowNode._meta.db_table, "job_id")
    guards.manage(describe_node_jobs)  # the jobs' API refuses writes to a node's job
    hooks.keep_runs(KEPT_RUNS)
    hooks.provide_context("upstream", ctx_upstream)
    hooks.provide_context("map_item", ctx_map_item)
    hooks.keep_runs(KEPT_ITEM_RUNS)
    scheduler_tick.connect(on_scheduler_tick, dispatch_uid="workflows.ticks")
    registry.register(COLLECTOR)  # /metrics: workflow runs by state, node start delay
    if contexts not in tracing.SOURCES:
        tracing.SOURCES.append(contexts)  # a node's run: its workflow run's trace context
