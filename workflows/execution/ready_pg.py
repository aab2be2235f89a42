"""The engine's two reads of a handoff as plain SQL on PostgreSQL: the candidates below
acked nodes locked, then which of them are ready (workflows/execution/engine.py, start_ready). They
are what the ORM builds (same tables, joins, lock and order), written out because Django
spent 2-6 ms of a chain's 20 ms handoff compiling them on a loaded machine (BENCHMARKS.md,
"Workflows (W7)"). Two statements still, not one: the readiness read must see what a
concurrent ack committed while this one waited on the lock (docs/workflows.md, "The
rules"), which a statement's own snapshot would not."""

from contextlib import contextmanager

from django.db import connections

from jobs.models import Job, Schedule
from runs.execution.leases import int_array
from workflows.execution import rules
from workflows.models import (
    NodeRun,
    NodeState,
    Workflow,
    WorkflowEdge,
    WorkflowNode,
    WorkflowRun,
    WorkflowRunState,
)

# Candidates above which a readiness read is planned without sequential scans (as the
# one-call ack's are: workflows/sql/ack_succeeded.sql, enable_seqscan); a handoff's few
# rows are not worth the two statements.
BY_INDEX_ABOVE = 8


@contextmanager
def by_index(candidates: int, using: str):
    """Plan the statements inside without sequential scans (SET LOCAL enable_seqscan =
    off, then back to the default) when ``candidates`` node runs are read on PostgreSQL,
    more than BY_INDEX_ABOVE; call inside a transaction. With statistics taken when every
    node run had succeeded, the readiness read's NOT EXISTS over the upstream node runs
    was planned as a scan of every node run per candidate: a start or an ack making 300
    runs read 90,000 rows (tests/test_workflows_stale_stats.py). The statements find
    their rows by key, for which an index is right at any size. Raises what the database
    raises; after an error the setting goes with the transaction's rollback."""
    if candidates <= BY_INDEX_ABOVE or connections[using].vendor != "postgresql":
        yield
        return
    with connections[using].cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
    yield
    with connections[using].cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan TO DEFAULT")


def _tables() -> dict[str, str]:
    return {"n": NodeRun._meta.db_table, "wr": WorkflowRun._meta.db_table,
            "w": Workflow._meta.db_table, "s": Schedule._meta.db_table,
            "wn": WorkflowNode._meta.db_table, "j": Job._meta.db_table,
            "e": WorkflowEdge._meta.db_table}


def lock_below(workflow_run_ids, upstream_node_ids, using: str) -> list[tuple[int, int, str]]:
    """Lock (FOR UPDATE, in id order) the pending node runs of the workflow runs
    ``workflow_run_ids`` whose node waits directly for one of ``upstream_node_ids``,
    whatever their workflow run's state (ready_rows reads it after the lock, as
    start_ready does); returns their (id, workflow run id, node's trigger rule). Call
    inside the ack's transaction."""
    t = _tables()
    sql = (f"SELECT n.id, n.workflow_run_id, wn.trigger_rule FROM {t['n']} AS n"
           f" JOIN {t['wn']} AS wn ON wn.id = n.node_id"
           " WHERE n.workflow_run_id = ANY(%s::bigint[]) AND n.state = %s"
           f" AND n.node_id IN (SELECT e.downstream_id FROM {t['e']} AS e"
           " WHERE e.upstream_id = ANY(%s::bigint[])) ORDER BY n.id FOR UPDATE OF n")
    with connections[using].cursor() as cursor:
        cursor.execute(sql, [int_array(workflow_run_ids), NodeState.PENDING,
                             int_array(upstream_node_ids)])
        return cursor.fetchall()


def ready_rows(locked: list[int], using: str) -> list[tuple]:
    """Of the locked node runs ``locked``, those still pending, of a running workflow
    run, whose trigger rule holds over their upstream node runs (same workflow run;
    workflows/execution/rules.py, ready_sql), as
    start_ready's rows: (node run id, workflow id, scheduled_at, started_by, schedule
    jitter_s or None, job id, queue, priority, max_attempts, shard_key, handler, owner
    id, mapped-over node id or None, sub-workflow id or None, job status). A statement
    of its own, after the lock (the module's docstring)."""
    t = _tables()
    sql = (
        "SELECT n.id, wr.workflow_id, wr.scheduled_at, wr.started_by, s.jitter_s, j.id,"
        " j.queue, j.priority, j.max_attempts, j.shard_key, j.handler, j.owner_id,"
        " wn.map_over_id, wn.subworkflow_id, j.status"
        f" FROM {t['n']} AS n JOIN {t['wr']} AS wr ON wr.id = n.workflow_run_id"
        f" JOIN {t['w']} AS w ON w.id = wr.workflow_id"
        f" LEFT JOIN {t['s']} AS s ON s.id = w.schedule_id"
        f" JOIN {t['wn']} AS wn ON wn.id = n.node_id JOIN {t['j']} AS j ON j.id = wn.job_id"
        " WHERE n.id = ANY(%s::bigint[]) AND n.state = %s AND wr.state = %s AND "
        + rules.ready_sql("n", "wn", t["n"], t["e"])
        # The runs are made in this order, so their ids follow it, and a lease breaks a
        # tie of priority and run_at by id: without it the order was the plan's, which
        # the statistics an earlier load left can change, not the one call's (n.id).
        + " ORDER BY n.id")
    with connections[using].cursor() as cursor:
        cursor.execute(sql, [int_array(locked), NodeState.PENDING, WorkflowRunState.RUNNING])
        return cursor.fetchall()
