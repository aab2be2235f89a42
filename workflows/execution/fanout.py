"""The fan-out of a mapped node (docs/workflows.md, "Mapped nodes"): once its trigger
rule holds, the node it maps over has succeeded with a list, and the node gets one run
of its job per item, in the transaction that found it ready (an ack's, a reconcile's).

Exactly once: the caller holds the pending node run's row lock (engine.start_ready); the
node run moves ``pending -> running`` with a conditional UPDATE before any run is made,
and UNIQUE (node_run, index) and UNIQUE (run_id) of MapItem hold whatever happens.

Before any run is made the list is checked against the owner's bounds: at most
``max_map_items`` items (OwnerPolicy, default OWNER_MAX_MAP_ITEMS), and the items past
the first against ``max_pending`` (the start admitted the node as one run). A list over
either, or a result that is no list, fails the mapped node with nothing made. An empty
list succeeds the mapped node at once with no run.

The item runs share the node's job, so each needs its own ``scheduled_at`` under the
runs' UNIQUE (job, scheduled_at): the workflow run's plus 1 + index microseconds, or,
when another workflow run of the same workflow holds that instant (two starts
microseconds apart), the next free one. Their ``scheduled_at`` orders and partitions
them; it is not when they run (``run_at``: now).
"""

from datetime import datetime, timedelta

from django.db import connections

from runs import tracing
from runs.brokers.shards import shard_of
from runs.models import Run, RunState
from runs.tenancy.quotas import QuotaExceeded, bounds_of, check_quotas
from runs.types import RunRef
from scheduler_core import conf
from workflows.execution.tracing import released
from workflows.models import MapItem, NodeRun, NodeState

SLOT_ROUNDS = 20  # rounds of finding free scheduled_at instants before giving up


class MapRefused(Exception):
    """A mapped node's list cannot be run: ``str()`` says why (the node run's error)."""


def max_items(owner_id: int | None, using: str) -> int:
    """The most items (a count; 0: no limit) one mapped node of ``owner_id`` (a user id, or
    None: no owner) may run for: its OwnerPolicy's ``max_map_items``, else
    OWNER_MAX_MAP_ITEMS (docs/isolation.md, "Tenant bounds")."""
    bounds = bounds_of(owner_id, using)
    return bounds.max_map_items if bounds is not None else conf.get("OWNER_MAX_MAP_ITEMS")


def fan_out(rows: list[tuple], now: datetime, using: str
            ) -> tuple[set[int], set[int], list[RunRef]]:
    """Fan out the ready mapped node runs ``rows`` (engine.start_ready's rows, the job's
    status left off: node run id, workflow id, scheduled_at, started_by, jitter_s, job
    id, queue, priority, max_attempts, shard_key, handler, owner id, mapped-over node
    id), each pending and locked by the caller. Returns (workflow runs in which a node
    run now runs, node run ids that ended at once: succeeded on an empty list or failed
    on a refused one, the refs of the item runs made and still pending). Raises
    IntegrityError when a node run's items exist already (UNIQUE (node_run, index)),
    RuntimeError when no free scheduled_at instants were found; the caller's savepoint
    or transaction undoes the whole fan-out then (docs/workflows.md, "Mapped nodes")."""
    fanned, ended, refs = set(), set(), []
    # In an ack, the items continue the span of the upstream whose ack made the node
    # ready (workflows/execution/tracing.py); elsewhere the span current.
    traces = released([row[0] for row in rows], using)
    for row in rows:
        node_run_id, owner_id, over = row[0], row[11], row[12]
        node_run = NodeRun.objects.using(using).filter(pk=node_run_id).values_list(
            "workflow_run_id", "state").first()
        if node_run is None or node_run[1] != NodeState.PENDING:
            continue
        try:
            items = _items(node_run[0], over, owner_id, using)
        except MapRefused as exc:
            NodeRun.objects.using(using).filter(pk=node_run_id, state=NodeState.PENDING).update(
                state=NodeState.FAILED, finished_at=now, ready_at=now, items=0, error=str(exc))
            ended.add(node_run_id)
            continue
        if not items:
            NodeRun.objects.using(using).filter(pk=node_run_id, state=NodeState.PENDING).update(
                state=NodeState.SUCCEEDED, finished_at=now, ready_at=now, items=0, error="")
            ended.add(node_run_id)
            continue
        moved = NodeRun.objects.using(using).filter(
            pk=node_run_id, state=NodeState.PENDING).update(
            state=NodeState.RUNNING, ready_at=now, items=len(items), error="")
        if not moved:
            continue
        with tracing.continuing(traces.get(node_run_id)):
            refs += _make_item_runs(row, node_run_id, items, now, using)
        fanned.add(node_run[0])
    return fanned, ended, refs


def _items(workflow_run_id: int, over: int, owner_id: int | None, using: str) -> list:
    """The list the node run maps over: the result of node ``over``'s run in the same
    workflow run, checked against the owner's bounds. Raises MapRefused."""
    upstream = NodeRun.objects.using(using).filter(
        workflow_run_id=workflow_run_id, node_id=over).values_list(
        "node__name", "run_id").first()
    name, run_id = upstream if upstream else ("?", None)
    result = Run.objects.using(using).filter(pk=run_id).values_list(
        "result", flat=True).first() if run_id else None
    if not isinstance(result, list):
        raise MapRefused(f"the result of node {name!r} is not a list (it is "
                         f"{type(result).__name__}): a mapped node runs once per item of "
                         f"a JSON array; nothing was run")
    limit = max_items(owner_id, using)
    if limit and len(result) > limit:
        raise MapRefused(f"the result of node {name!r} has {len(result)} items, more than "
                         f"the owner's max_map_items ({limit}); nothing was run")
    bounds = bounds_of(owner_id, using)
    if bounds is not None and len(result) > 1:
        try:  # the start counted the node as one pending run: the rest are new
            check_quotas(bounds, 0, len(result) - 1, using)
        except QuotaExceeded as exc:
            raise MapRefused(f"its {len(result)} items would take the owner over "
                             f"max_pending: {exc}; nothing was run") from None
    return result


def _make_item_runs(row: tuple, node_run_id: int, items: list, now: datetime,
                    using: str) -> list[RunRef]:
    """One run of the node's job per item and its MapItem row; returns the refs of those
    runs still pending (all, unless the database says otherwise)."""
    (_, _, scheduled_at, _, _, job_id, queue, priority, max_attempts, shard_key, handler,
     owner_id, _) = row
    shard = shard_of(shard_key or handler, conf.get("SHARDS"))
    made = _insert_runs(job_id, scheduled_at, len(items), (now, queue, shard, priority,
                                                            max_attempts), using)
    MapItem.objects.using(using).bulk_create([
        MapItem(node_run_id=node_run_id, index=i, item=item, run_id=made[i])
        for i, item in enumerate(items)], batch_size=1000)
    return [RunRef(made[i], queue, shard, priority, now, owner_id) for i in range(len(items))]


def _insert_runs(job_id: int, base: datetime, count: int, fields: tuple,
                 using: str) -> dict[int, int]:
    """Insert ``count`` runs of job ``job_id`` (``fields``: run_at, queue, shard,
    priority, max_attempts) at free ``scheduled_at`` instants from ``base`` + 1 µs on;
    returns {index: run id}. Raises RuntimeError when no free instants were found in
    SLOT_ROUNDS rounds (the listener's savepoint undoes the fan-out; the reconcile
    tries again)."""
    made: dict[int, int] = {}
    wanted = list(range(count))
    offset = 1
    for _ in range(SLOT_ROUNDS):
        slots = {base + timedelta(microseconds=offset + k): i for k, i in enumerate(wanted)}
        offset += len(wanted)
        for at, run_id in _insert_free(job_id, list(slots), fields, using):
            made[slots[at]] = run_id
        wanted = [i for i in wanted if i not in made]
        if not wanted:
            return made
    raise RuntimeError(f"no free scheduled_at instants for {len(wanted)} runs of job {job_id}")


def _insert_free(job_id: int, slots: list[datetime], fields: tuple,
                 using: str) -> list[tuple[datetime, int]]:
    """Insert a run of job ``job_id`` at each instant of ``slots`` no run of the job holds
    yet, with the trace context current (tracing.current()); returns (scheduled_at, id)
    of those inserted."""
    run_at, queue, shard, priority, max_attempts = fields
    trace = tracing.current()
    if connections[using].vendor == "postgresql":
        sql = (f"INSERT INTO {Run._meta.db_table} (job_id, scheduled_at, run_at, jitter_s,"
               " state, queue, shard, priority, attempt, max_attempts, worker_id, created_at,"
               " error, catch_up, trace_context) SELECT %s, s, %s, 0, %s, %s, %s, %s, 0, %s,"
               " '', %s, '', false, %s"
               " FROM unnest(%s::timestamptz[]) AS s ON CONFLICT DO NOTHING"
               " RETURNING scheduled_at, id")
        with connections[using].cursor() as cursor:
            cursor.execute(sql, [job_id, run_at, RunState.SCHEDULED, queue, shard, priority,
                                 max_attempts, run_at, trace, slots])
            return cursor.fetchall()
    # SQLite serialises writers: what is free now is free at the insert.
    runs = Run.objects.using(using)
    taken = set(runs.filter(job_id=job_id, scheduled_at__in=slots)
                .values_list("scheduled_at", flat=True))
    free = [at for at in slots if at not in taken]
    runs.bulk_create([Run(job_id=job_id, scheduled_at=at, run_at=run_at, queue=queue,
                          shard=shard, priority=priority, max_attempts=max_attempts,
                          trace_context=trace)
                      for at in free], batch_size=1000)
    return list(runs.filter(job_id=job_id, scheduled_at__in=free)
                .values_list("scheduled_at", "id"))

