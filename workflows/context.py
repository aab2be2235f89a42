"""What a node's handler reads of its upstream nodes: ``ctx.upstream["extract"]`` is
the result of node ``extract``'s run in the same workflow run (docs/workflows.md,
"Results"). A django.tasks task node reads the same with ``upstream_of(context)``.

The read happens in the worker's child, on first use only, so handlers that never look
cost nothing. It goes through a connection of the child's own, opened on first use and
kept for the child's life: a child is forked from a worker whose own connection it must
never write to.
"""

import json
import os
from types import MappingProxyType

from django.db import connections

from runs.models import Run
from scheduler_core import conf
from workflows.models import MapItem, NodeRun, WorkflowEdge, WorkflowNode

_own: dict[tuple[int, str], object] = {}  # (process id, alias) -> its private connection


class Results(dict):
    """Upstream results by node name; a name that is not an upstream of this node is a
    KeyError that says which names are (a bare ``KeyError: 'extract'`` did not)."""

    def __missing__(self, name):
        known = ", ".join(sorted(self)) or "none (no workflow node's run, or no upstream)"
        raise KeyError(f"{name!r} is not an upstream node of this node; its upstream "
                       f"nodes: {known}")


def _connection(alias: str = "default"):
    key = (os.getpid(), alias)
    connection = _own.get(key)
    if connection is None:
        connection = _own[key] = connections.create_connection(alias)
    return connection


def upstream_results(run_id: int, alias: str = "default") -> MappingProxyType:
    """The results of the upstream nodes of the node whose run is ``run_id`` (a plain
    node's run, or an item's of a mapped node), by node name (a read-only mapping; empty
    when the run is no workflow node's). A mapped upstream's result is the list of its
    items' results in item order, None for an item that did not succeed
    (docs/workflows.md, "Mapped nodes"); a sub-workflow upstream's, its child run's
    leaf nodes' results by name. A node without upstreams in a child workflow run reads
    its parent's sub-workflow node's upstreams ("Sub-workflows"). One query, more with a
    mapped or sub-workflow upstream."""
    node_run, edge, item = (NodeRun._meta.db_table, WorkflowEdge._meta.db_table,
                            MapItem._meta.db_table)
    # The node run itself, or, for a root of a child workflow run, its parent's node run.
    me = (f"(SELECT d.id, d.workflow_run_id, d.node_id FROM {node_run} d "
          f"WHERE d.id = COALESCE((SELECT p.id FROM {node_run} p WHERE p.run_id = %s), "
          f"(SELECT i.node_run_id FROM {item} i WHERE i.run_id = %s)))")
    target = (f"COALESCE((SELECT pn.id FROM {node_run} pn, {me} m "
              f"WHERE pn.child_run_id = m.workflow_run_id AND NOT EXISTS (SELECT 1 FROM "
              f"{edge} me WHERE me.downstream_id = m.node_id)), (SELECT m2.id FROM {me} m2))")
    with _connection(alias).cursor() as cursor:
        return MappingProxyType(Results(_named(cursor, _SELECT + (
            f"JOIN {edge} e ON e.upstream_id = u.node_id "
            f"JOIN {node_run} d ON d.workflow_run_id = u.workflow_run_id "
            f"AND d.node_id = e.downstream_id WHERE d.id = {target}"),
            [run_id, run_id, run_id, run_id])))


_SELECT = (f"SELECT un.name, r.result, u.id, u.items, u.child_run_id "
           f"FROM {NodeRun._meta.db_table} u "
           f"JOIN {WorkflowNode._meta.db_table} un ON un.id = u.node_id "
           f"LEFT JOIN {Run._meta.db_table} r ON r.id = u.run_id ")


def _named(cursor, sql: str, params: list, depth: int = 0) -> dict:
    """{node name: result} of the node runs ``sql`` (_SELECT and its conditions) reads:
    a plain node's run's result, a mapped node's items' results in item order, a
    sub-workflow node's child run's leaves (its nodes without downstream), each read
    the same way, to WORKFLOW_MAX_DEPTH levels."""
    cursor.execute(sql, params)
    rows = cursor.fetchall()
    item, run, edge = MapItem._meta.db_table, Run._meta.db_table, WorkflowEdge._meta.db_table
    mapped = {row[2]: [] for row in rows if row[3] is not None}
    if mapped:
        cursor.execute(f"SELECT i.node_run_id, r.result FROM {item} i LEFT JOIN {run} r "
                       f"ON r.id = i.run_id AND r.state = 'succeeded' WHERE "
                       f"i.node_run_id IN ({', '.join(['%s'] * len(mapped))}) "
                       f"ORDER BY i.node_run_id, i.\"index\"", list(mapped))
        for node_run_id, value in cursor.fetchall():
            mapped[node_run_id].append(_json(value))
    children = {}
    for row in rows:
        if row[4] is not None and depth < conf.get("WORKFLOW_MAX_DEPTH"):
            children[row[2]] = _named(cursor, _SELECT + (
                f"WHERE u.workflow_run_id = %s AND NOT EXISTS (SELECT 1 FROM {edge} le "
                "WHERE le.upstream_id = u.node_id) ORDER BY un.name"), [row[4]], depth + 1)
    return {name: mapped[nid] if nid in mapped else children.get(nid, _json(value))
            for name, value, nid, *_ in rows}


def _json(value):
    """A result as read: jsonb comes as text (Django's loader) or decoded, SQLite's as
    text."""
    return json.loads(value) if isinstance(value, str | bytes) else value


def map_item(run_id: int, alias: str = "default") -> MappingProxyType | None:
    """``{"index": i, "item": value}`` of the mapped node's item whose run is ``run_id``
    (a read-only mapping), or None when the run is no item (docs/workflows.md, "Mapped
    nodes"). One query."""
    with _connection(alias).cursor() as cursor:
        cursor.execute(f"SELECT i.\"index\", i.item FROM {MapItem._meta.db_table} i "
                       "WHERE i.run_id = %s", [run_id])
        row = cursor.fetchone()
    if row is None:
        return None
    return MappingProxyType({"index": row[0], "item": _json(row[1])})


def ctx_map_item(ctx) -> MappingProxyType | None:
    """The value of ``ctx.map_item`` (runs/context.py) for handler context ``ctx``."""
    return map_item(ctx.run_id, ctx.using)


def upstream_of(context) -> MappingProxyType:
    """``ctx.upstream`` for a django.tasks task that ``takes_context``: the results of its
    upstream nodes by name, from its TaskContext (whose result id is the run id)."""
    result = context.task_result
    return upstream_results(int(result.id), result.task.get_backend().using)


def ctx_upstream(ctx) -> MappingProxyType:
    """The value of ``ctx.upstream`` (runs/context.py) for handler context ``ctx``."""
    return upstream_results(ctx.run_id, ctx.using)
