"""A workflow node's ack when its run succeeded (docs/workflows.md, "The rules"), inside
the run's ack transaction (the listener, listener.py, calls it): the node runs succeed,
the nodes below them whose trigger rule now holds get their runs exactly once (the
engine's start_ready, engine.py), and each workflow run concerned ends once none of its
nodes can progress. A failed node run's ack is failures.py.

Its common case is also written in SQL, as one round trip on PostgreSQL (ack_pg.py with
workflows/sql/ack_succeeded.sql, whose header says why): a change of these rules is a
change there too, and tests/test_workflows_ack_paths.py compares the two.
"""

from datetime import datetime

from django.db import connections

from runs.execution.leases import int_array
from workflows.execution.engine import finish_if_done, node_runs_of, settle, start_ready
from workflows.models import NodeRun, NodeState


def nodes_succeeded(run_ids: list[int], now: datetime, using: str) -> None:
    """The runs ``run_ids`` succeeded (inside their ack's transaction): their node runs
    succeed, the nodes downstream of them that are now ready get their runs, and each
    workflow run concerned ends if nothing is left to run."""
    rows = _succeed_node_runs(run_ids, now, using)
    if not rows:
        return
    workflow_runs = {r[1] for r in rows}
    running: set[int] = set()
    doomed: set[int] = set()
    start_ready(workflow_runs, now, using, below={r[2] for r in rows}, running=running,
                doomed=doomed)
    if doomed:  # an all_failed or one_failed node below may no longer hold
        settle(doomed, (), now, using, running)
    # A workflow run in which a node has just started is not done: one statement fewer
    # on each of a chain's handoffs (BENCHMARKS.md, "Workflows (W7)").
    finish_if_done(workflow_runs - running, now, using)


def _succeed_node_runs(run_ids: list[int], now: datetime, using: str) -> list[tuple]:
    """Move the running node runs of ``run_ids`` to succeeded; returns (node run id,
    workflow run id, node id) of those moved. One UPDATE ... RETURNING on PostgreSQL (a
    chain's every handoff pays this step, BENCHMARKS.md "Workflows (W7)"), a read and an
    update elsewhere."""
    if connections[using].vendor == "postgresql":
        with connections[using].cursor() as cursor:
            cursor.execute(
                f"UPDATE {NodeRun._meta.db_table} SET state = %s, finished_at = %s, "
                "error = '' WHERE run_id = ANY(%s::bigint[]) AND state = %s "
                "RETURNING id, workflow_run_id, node_id",
                [NodeState.SUCCEEDED, now, int_array(run_ids), NodeState.RUNNING])
            return cursor.fetchall()
    rows = node_runs_of(run_ids, [NodeState.RUNNING], using)
    if rows:
        NodeRun.objects.using(using).filter(pk__in=[r[0] for r in rows],
                                            state=NodeState.RUNNING).update(
            state=NodeState.SUCCEEDED, finished_at=now, error="")
    return rows
