"""The ack of workflow nodes' successes in one round trip on PostgreSQL: one call of the
function workflows_ack_succeeded, in autocommit, so the call is its own transaction and
its commit (docs/workflows.md, "Latency"; BENCHMARKS.md, "Workflows (W7)").

What the function does, step by step, why the same ack is also written in
workflows/execution/engine.py, and the test that holds the two equal: the header of
workflows/sql/ack_succeeded.sql. Here: the call's arguments (the worker's offer,
runs/execution/continuation.py) and its rows turned into the offer's leases and the broker's
pushes. When the function leaves a batch to the engine (SQLSTATE WFA01) or the database
is behind this code (no such function), nothing changed and the caller acks through the
ORM path.
"""

import json
import logging

from django.db import DatabaseError, connections

from runs import tracing
from runs.brokers import get_broker
from runs.clock import from_us
from runs.execution import continuation
from runs.execution.leases import int_array
from runs.flow import control as flow
from runs.types import Lease, Outcome, RunRef
from scheduler_core import conf

log = logging.getLogger("scheduler.hooks")

LEFT_TO_ORM = "WFA01"  # the function's SQLSTATE for a case it leaves to the ORM path
# undefined_function: the database is behind this code (migrate runs after the deploy):
# the ORM path serves, as for a case the function leaves to it.
BEHIND = "42883"
SQL = ("SELECT * FROM workflows_ack_succeeded(%s::bigint[], %s::int[], %s::text[], %s,"
       " %s::text[], %s, %s, %s::text[], %s, %s, %s::text[], %s::int[], %s::text[])")


def usable(using: str) -> bool:
    """Whether the one-call ack can serve ``using``: PostgreSQL, outside a transaction
    (the call must be its own, and a refused call must not break the caller's)."""
    connection = connections[using]
    return connection.vendor == "postgresql" and not connection.in_atomic_block


def ack_successes(outcomes: list[Outcome], using: str) -> list[bool] | None:
    """Ack ``outcomes`` (successes without log lines of runs that are workflow nodes,
    results already checked) in one call, with the current offer
    (runs/execution/continuation.py); returns per outcome whether it was applied, or None when the
    function left the batch to the ORM path (nothing changed then). Fills the offer's
    ``taken`` and ``pushed``; pushes the other runs made ready to the broker. Raises what
    the database raises (DatabaseError and its kinds), nothing changed then either."""
    offer = continuation.current()
    # Flow control by handler or key in use: nothing continued (runs/execution/continuation.py).
    room = 0 if offer is None or flow.in_use(using) else offer.room - len(offer.taken)
    results = [None if o.result is None else json.dumps(o.result) for o in outcomes]
    broker = get_broker(using)
    if offer is None or room <= 0:
        urgent_queues, urgent_priorities = [], []
    elif broker.ready_when_stored:
        # The database broker's ready runs are rows: the function reads them itself.
        urgent_queues = urgent_priorities = None
    else:
        waiting = sorted(continuation.urgent(offer).items())
        urgent_queues = [q for q, _ in waiting]
        urgent_priorities = [p for _, p in waiting]
    params = [int_array([o.lease.run_id for o in outcomes]),
              int_array([o.lease.attempt for o in outcomes]), results,
              "" if offer is None else offer.worker_id,
              [] if offer is None else sorted(offer.queues), room,
              conf.get("LEASE_TTL_S") if offer is None else offer.ttl_s,
              sorted(continuation.limited_queues()), bool(conf.get("OWNER_CONCURRENCY")),
              conf.get("SHARDS"), urgent_queues, urgent_priorities, _traces(outcomes)]
    try:
        with connections[using].cursor() as cursor:
            cursor.execute(SQL, params)
            rows = cursor.fetchall()
    except DatabaseError as exc:
        if getattr(exc.__cause__, "sqlstate", None) in (LEFT_TO_ORM, BEHIND):
            return None
        raise
    acked, taken, pushed = set(), [], []
    for kind, run_id, attempt, queue, shard, priority, run_at, owner, expires_us, job_id, \
            scheduled_us, handler, payload, timeout_s, trace in rows:
        if kind == "acked":
            acked.add((run_id, attempt))
        elif kind == "leased":
            taken.append((Lease(run_id, attempt, queue, shard, from_us(expires_us), task={
                "job_id": job_id, "scheduled_at_us": scheduled_us, "handler": handler,
                "payload": payload, "timeout_s": timeout_s, "trace": trace}), owner))
        elif kind == "pushed":
            pushed.append(RunRef(run_id, queue, shard, priority, run_at, owner))
        else:
            log.error("run listener WorkflowListener failed on succeeded runs %s (%s); "
                      "its reconcile repairs it", sorted(a[0] for a in acked)[:20], handler)
    if offer is not None:
        offer.taken += taken
        offer.pushed += len(pushed)
    broker.push_after_commit(pushed)
    accepted = [(o.lease.run_id, o.lease.attempt) in acked for o in outcomes]
    for o, ok in zip(outcomes, accepted, strict=True):
        o.watched = True
        if ok:
            o.fate = "succeeded"
    return accepted


def _traces(outcomes: list[Outcome]) -> list[str | None] | None:
    """The traceparent of each outcome's ack span (runs/tracing.py, releasing), which
    the runs its ack makes store; None, the function's "trace nothing", while no ack
    span is current (tracing off: no cost)."""
    spans = tracing.releasing_now()
    if spans is None:
        return None
    return [spans.get(o.lease.run_id) for o in outcomes]
