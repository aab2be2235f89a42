"""What WorkflowsConfig.ready connects (docs/workflows.md, "Where the engine hooks in"):
the run listener (runs/hooks.py), the jobs the history retention keeps (each node's),
``ctx.upstream``, the scheduler's tick (cron workflow runs and the reconcile) and the
workflows' families on /metrics (workflows/metrics.py)."""

from jobs.scheduler import scheduler_tick
from runs import hooks
from runs.metrics import registry
from workflows.context import ctx_upstream
from workflows.listener import LISTENER
from workflows.metrics import COLLECTOR
from workflows.models import WorkflowNode
from workflows.ticks import on_scheduler_tick


def connect() -> None:
    hooks.register(LISTENER)
    hooks.keep_jobs(WorkflowNode._meta.db_table, "job_id")
    hooks.provide_context("upstream", ctx_upstream)
    scheduler_tick.connect(on_scheduler_tick, dispatch_uid="workflows.ticks")
    registry.register(COLLECTOR)  # /metrics: workflow runs by state, node start delay
