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
    (docs/workflows.md, "Mapped nodes"). One query, two with a mapped upstream."""
    node_run, edge, node, run, item = (
        NodeRun._meta.db_table, WorkflowEdge._meta.db_table, WorkflowNode._meta.db_table,
        Run._meta.db_table, MapItem._meta.db_table)
    sql = (f"SELECT un.name, r.result, u.id, u.items FROM {node_run} d "
           f"JOIN {edge} e ON e.downstream_id = d.node_id "
           f"JOIN {node_run} u ON u.workflow_run_id = d.workflow_run_id "
           f"AND u.node_id = e.upstream_id "
           f"JOIN {node} un ON un.id = u.node_id "
           f"LEFT JOIN {run} r ON r.id = u.run_id "
           f"WHERE d.id = COALESCE((SELECT p.id FROM {node_run} p WHERE p.run_id = %s), "
           f"(SELECT i.node_run_id FROM {item} i WHERE i.run_id = %s))")
    connection = _connection(alias)
    with connection.cursor() as cursor:
        cursor.execute(sql, [run_id, run_id])
        rows = cursor.fetchall()
        mapped = {row[2]: [] for row in rows if row[3] is not None}
        if mapped:
            cursor.execute(f"SELECT i.node_run_id, r.result FROM {item} i LEFT JOIN {run} r "
                           f"ON r.id = i.run_id AND r.state = 'succeeded' WHERE "
                           f"i.node_run_id IN ({', '.join(['%s'] * len(mapped))}) "
                           f"ORDER BY i.node_run_id, i.\"index\"", list(mapped))
            for node_run_id, value in cursor.fetchall():
                mapped[node_run_id].append(_json(value))
    return MappingProxyType(Results({
        name: mapped[nid] if nid in mapped else _json(value)
        for name, value, nid, _ in rows}))


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
