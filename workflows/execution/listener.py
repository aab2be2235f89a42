"""The workflow engine's place in the runs' state changes (runs/execution/hooks.py): which runs are
workflow nodes, the bound on a node's result, and what each change of a node's run does
to its workflow run (docs/workflows.md, "Where the engine hooks in")."""

import json

from runs.execution import continuation, hooks
from scheduler_core import conf
from workflows.execution import ack_pg
from workflows.execution.ack import nodes_succeeded
from workflows.execution.failures import nodes_failed, nodes_requeued
from workflows.execution.items import item_runs, items_finished, items_requeued
from workflows.execution.quota import revived_by_requeue, unmade_node_runs
from workflows.models import MapItem, NodeRun, NodeState


def result_size_problem(result, cap: int | None = None) -> str | None:
    """Why ``result`` is too big to be a watched run's result, or None: at most ``cap``
    bytes (default WORKFLOW_MAX_RESULT_BYTES) of compact UTF-8 JSON, because every
    downstream node reads a node's (docs/workflows.md, "Results"), and an on_success
    callback's payload carries its job's run's (docs/callbacks.md)."""
    if result is None or isinstance(result, bool | int | float):
        return None
    cap = conf.get("WORKFLOW_MAX_RESULT_BYTES") if cap is None else cap
    try:
        size = len(json.dumps(result, separators=(",", ":"), ensure_ascii=False).encode())
    except (TypeError, ValueError, RecursionError):
        return None  # not JSON at all: the worker's own check already failed the attempt
    if size > cap:
        return (f"the result of this run is {size} bytes of JSON, more than "
                f"WORKFLOW_MAX_RESULT_BYTES ({cap}), the bound of a workflow node's or an "
                f"on_success job's result, which other runs read; return less (a reference "
                f"to where the data is, say) - the run goes to the dead letter, as a retry "
                f"would return the same")
    return None


class WorkflowListener(hooks.RunListener):
    """Follows the runs of workflow nodes: a run is one when a NodeRun or a mapped
    node's MapItem points at it, which is written in the transaction that creates the
    run."""

    def watched(self, run_ids: list[int], using: str) -> set[int]:
        return set(NodeRun.objects.using(using).filter(run_id__in=run_ids)
                   .values_list("run_id", flat=True)) | item_runs(run_ids, using)

    def watched_sql(self, run_id: str) -> str:
        return (f"(EXISTS (SELECT 1 FROM {NodeRun._meta.db_table} AS w WHERE w.run_id = "
                f"{run_id}) OR EXISTS (SELECT 1 FROM {MapItem._meta.db_table} AS wi "
                f"WHERE wi.run_id = {run_id}))")

    def refuse_result(self, run_id: int, result) -> str | None:
        return result_size_problem(result)

    def ack_successes(self, outcomes: list, using: str) -> list[bool] | None:
        # One round trip on PostgreSQL (workflows/execution/ack_pg.py); elsewhere the general path.
        if not ack_pg.usable(using):
            return None
        return ack_pg.ack_successes(outcomes, using)

    def changed(self, event: str, run_ids: list[int], now, using: str) -> None:
        # Runs continued on the acking worker (runs/execution/continuation.py) roll back with this
        # listener's savepoint if it fails: the offer must forget them too. A failure
        # starts nodes as well (an all_done or one_failed node below it).
        taken = continuation.mark()
        try:
            self._changed(event, run_ids, now, using)
        except BaseException:
            continuation.undo_to(taken)
            raise

    def _changed(self, event: str, run_ids: list[int], now, using: str) -> None:
        # A mapped node's items (workflows/execution/items.py) after the plain nodes.
        if event == hooks.SUCCEEDED:
            nodes_succeeded(run_ids, now, using)
            items_finished(run_ids, NodeState.SUCCEEDED, now, using)
        elif event in (hooks.DEAD, hooks.EXPIRED):
            # An expired run never ran: to its downstream it failed (docs/workflows.md).
            nodes_failed(run_ids, NodeState.FAILED, now, using)
            items_finished(run_ids, NodeState.FAILED, now, using)
        elif event == hooks.CANCELLED:
            nodes_failed(run_ids, NodeState.CANCELLED, now, using)
            items_finished(run_ids, NodeState.CANCELLED, now, using)
        elif event == hooks.REQUEUED:
            nodes_requeued(run_ids, now, using)
            items_requeued(run_ids, now, using)

    def requeue_revives(self, run_ids: list[int], using: str) -> dict[int, int]:
        return revived_by_requeue(run_ids, using)

    def promised(self, bounds, using: str) -> int:
        return unmade_node_runs(bounds, using)


LISTENER = WorkflowListener()
