"""The workflow engine's forward steps (docs/workflows.md, "The rules"): a node becomes a
run once its trigger rule holds over its upstream node runs in the same workflow run
(workflows/execution/rules.py; by default: every one succeeded), exactly once, a node whose rule
can no longer hold is marked (workflows/graph.py), and a workflow run ends once none of
its nodes can progress.

Exactly once, however the upstreams finish: the candidates are locked (FOR UPDATE, in id
order, so two acks never wait on each other in a circle) before their upstreams are read,
and that read is a statement of its own. Under PostgreSQL's READ COMMITTED, of two acks
that finish a node's last two upstreams at once, the second to get the lock reads the
first's committed success, so one of them sees the node ready; the one that does moves
it ``pending -> running`` with a conditional UPDATE, and UNIQUE (workflow_run, node),
UNIQUE (run_id) and the runs' UNIQUE (job, scheduled_at) hold whatever happens. SQLite
serialises writers (BEGIN IMMEDIATE). Everything here runs inside the caller's
transaction (the ack's, a start's, a reconcile's); runs reach the broker after commit.

Lock order, everywhere: runs, then node runs, then the workflow run.

A node run's success comes in through ack.py, its failure through failures.py.
"""

from datetime import datetime

from django.db import connections
from django.db.models import QuerySet
from django.utils import timezone

from jobs.models import Job
from jobs.schedules import cron
from runs import tracing
from runs.brokers import get_broker
from runs.brokers.shards import shard_of
from runs.clock import seconds
from runs.execution import continuation
from runs.execution.leases import int_array
from runs.models import PENDING_STATES, Run, RunState
from runs.types import RunRef
from scheduler_core import conf
from workflows.execution import fanout, nesting, ready_pg, rules
from workflows.execution import tracing as workflow_tracing
from workflows.graph import propagate
from workflows.models import (
    FINE_NODE_STATES,
    NodeRun,
    NodeState,
    WorkflowEdge,
    WorkflowRun,
    WorkflowRunState,
)


def node_runs_of(run_ids: list[int], states, using: str) -> list[tuple[int, int, int]]:
    """(node run id, workflow run id, node id) of the node runs in ``states`` whose run is
    one of ``run_ids``."""
    return list(NodeRun.objects.using(using).filter(run_id__in=run_ids, state__in=states)
                .values_list("id", "workflow_run_id", "node_id"))


def start_ready(workflow_run_ids, now: datetime, using: str,
                node_ids=None, running: set | None = None, below=None,
                doomed: set | None = None) -> list[int]:
    """Make a run for every node of the running workflow runs ``workflow_run_ids`` that is
    pending and whose trigger rule holds (``node_ids``: consider only those nodes, ids or
    a subquery of them; ``below``: only the nodes that wait directly for one of these
    node ids; neither: every node). Returns the node run ids started; ``running``, if
    given, gets the ids of the workflow runs in which one was (PostgreSQL only: elsewhere
    it stays as it is); ``doomed``, if given, those in which a candidate left pending
    has a rule an upstream's success can make fail (rules.KILLED_BY_SUCCESS: settle
    them)."""
    # The candidates are locked whatever their workflow run's state, and that state is
    # read after the lock, in the ready statement: pause and resume lock the same
    # pending rows first (control.py), so one of the two waits for the other's commit
    # and pause is exact (docs/workflows.md, "Cancel and pause").
    if below is not None and connections[using].vendor == "postgresql":
        # A handoff's reads as plain SQL (workflows/execution/ready_pg.py).
        locked = ready_pg.lock_below(workflow_run_ids, below, using)
        with ready_pg.by_index(len(locked), using):
            ready = ready_pg.ready_rows([r[0] for r in locked], using) if locked else []
        _doomed(locked, ready, doomed)
        return _start(ready, now, using, running)
    if below is not None:
        node_ids = downstream_of(below, using)
    candidates = NodeRun.objects.using(using).filter(
        workflow_run_id__in=list(workflow_run_ids), state=NodeState.PENDING)
    if node_ids is not None:
        candidates = candidates.filter(
            node_id__in=node_ids if isinstance(node_ids, QuerySet) else list(node_ids))
    locked = list(candidates.order_by("id").select_for_update(of=("self",))
                  .values_list("id", "workflow_run_id", "node__trigger_rule"))
    if not locked:
        return []
    with ready_pg.by_index(len(locked), using):
        ready = list(
            NodeRun.objects.using(using).filter(pk__in=[r[0] for r in locked],
                                                state=NodeState.PENDING,
                                                workflow_run__state=WorkflowRunState.RUNNING)
            .filter(rules.ready_q())
            .values_list("id", "workflow_run__workflow_id", "workflow_run__scheduled_at",
                         "workflow_run__started_by", "workflow_run__workflow__schedule__jitter_s",
                         "node__job_id", "node__job__queue", "node__job__priority",
                         "node__job__max_attempts", "node__job__shard_key",
                         "node__job__handler", "node__job__owner_id", "node__map_over_id",
                         "node__subworkflow_id", "node__job__status")
            .order_by("id"))  # the runs' order, as ready_pg.ready_rows says why
    _doomed(locked, ready, doomed)
    return _start(ready, now, using, running)


def _doomed(locked: list[tuple], ready: list[tuple], doomed: set | None) -> None:
    """Add to ``doomed`` the workflow runs of the ``locked`` (node run id, workflow run
    id, rule) rows not ``ready`` whose rule an upstream's success can make fail."""
    if doomed is None:
        return
    started = {row[0] for row in ready}
    doomed |= {wr for nid, wr, rule in locked
               if rule in rules.KILLED_BY_SUCCESS and nid not in started}


def settle(workflow_run_ids, changed, now: datetime, using: str,
           running: set | None = None) -> list[int]:
    """After node runs of ``workflow_run_ids`` changed state other than by starting
    (``changed``: their node ids): mark the pending nodes whose rule can no longer hold
    (graph.propagate), then start those below ``changed`` or the marked that are now
    ready (an ``all_done`` clean-up below a failure, say). Marks and starts cascade: a
    start whose job was cancelled settles again (_start). Returns the node run ids
    started."""
    below = set(changed) | propagate(workflow_run_ids, now, using)
    if not below:
        return []
    return start_ready(workflow_run_ids, now, using, below=below, running=running)


def _start(ready: list[tuple], now: datetime, using: str, running: set | None) -> list[int]:
    """start_ready's end: runs for the ``ready`` rows (see start_ready's read), a mapped
    node's fan-out (workflows/execution/fanout.py), a sub-workflow node's child (nesting.py), or
    their cancellation when their job was cancelled; returns the node run ids started
    (also those the cancellation's settle started)."""
    # A node whose job was cancelled (through the jobs' API) can never run: its runs would
    # wait for ever, as a cancelled job's runs are never leased. It is cancelled instead.
    gone = [row for row in ready if row[-1] == Job.Status.CANCELLED]
    ready = [row for row in ready if row[-1] != Job.Status.CANCELLED]
    live = [row[:-3] for row in ready if row[-3] is None and row[-2] is None]
    mapped = [row[:-2] for row in ready if row[-3] is not None]
    extra = nesting.start_children([row[:-1] for row in ready if row[-2] is not None],
                                   now, using, running)
    if live:
        moved = _make_runs(live, now, using)
        if running is not None:
            running |= moved
    if mapped:  # docs/workflows.md, "Mapped nodes": their items' runs, or their end
        fanned, ended, refs = fanout.fan_out(mapped, now, using)
        get_broker(using).push_after_commit(_continue(refs, now, using))
        if running is not None:
            running |= fanned
        if ended:  # an empty list succeeded it, a refused one failed it
            cut = list(NodeRun.objects.using(using).filter(pk__in=ended)
                       .values_list("workflow_run_id", "node_id"))
            extra += settle({c[0] for c in cut}, {c[1] for c in cut}, now, using, running)
        live = live + [row for row in mapped if row[0] not in ended]
    if gone:
        NodeRun.objects.using(using).filter(pk__in=[r[0] for r in gone],
                                            state=NodeState.PENDING).update(
            state=NodeState.CANCELLED, finished_at=now,
            error="its job was cancelled, so it cannot run")
        cut = list(NodeRun.objects.using(using).filter(pk__in=[r[0] for r in gone])
                   .values_list("workflow_run_id", "node_id"))
        extra += settle({c[0] for c in cut}, {c[1] for c in cut}, now, using, running)
    return [row[0] for row in live] + extra


def start_time(row, now: datetime) -> tuple[datetime, float]:
    """When a ready node's run (or child workflow run) may start (an aware datetime), and
    its jitter (s), for ``row`` of start_ready: now, but never before its
    workflow run's ``scheduled_at`` plus, for a run its schedule started, the schedule's
    jitter (the root runs of a workflow run made LOOKAHEAD_S ahead, or of one started
    for a later time, wait for it in the broker, as a job's runs do)."""
    _, workflow_id, scheduled_at, started_by, jitter_s, *_ = row
    jitter = 0.0
    if started_by == WorkflowRun.StartedBy.SCHEDULE and jitter_s:
        jitter = cron.jitter_offset(workflow_id, jitter_s)
    start = scheduled_at + seconds(jitter)
    return (start, jitter) if start > now else (now, 0.0)


def _make_runs(ready: list[tuple], now: datetime, using: str) -> set[int]:
    """Insert the runs of ``ready`` node runs (rows of start_ready) and point their node
    runs at them. A run that exists already for (job, scheduled_at) is adopted rather than
    duplicated (the runs' unique constraint), so a repeated start is harmless. Returns
    the workflow runs whose node runs moved to running (_point_at_runs)."""
    shards = conf.get("SHARDS")
    planned = {}
    for row in ready:
        (node_run_id, _, scheduled_at, _, _, job_id, queue, priority, max_attempts,
         shard_key, handler, owner_id) = row
        run_at, jitter = start_time(row, now)
        planned[(job_id, scheduled_at)] = (node_run_id, owner_id, (
            job_id, scheduled_at, run_at, jitter, queue, shard_of(shard_key or handler, shards),
            priority, max_attempts))
    # Each run's trace context (docs/tracing.md, "Workflows"): in an ack, the span of the
    # upstream whose ack made it; else the span current (a start's: a request's).
    current = tracing.current()
    released = workflow_tracing.released([entry[0] for entry in planned.values()], using)
    traces = [released.get(entry[0], current) for entry in planned.values()]
    if connections[using].vendor == "postgresql":
        found = _insert_runs_pg([entry[2] for entry in planned.values()], using, traces)
    else:
        runs = Run.objects.using(using)
        runs.bulk_create([Run(job_id=v[0], scheduled_at=v[1], run_at=v[2], jitter_s=v[3],
                              queue=v[4], shard=v[5], priority=v[6], max_attempts=v[7],
                              trace_context=trace)
                          for (_, _, v), trace in zip(planned.values(), traces, strict=True)],
                         batch_size=1000, ignore_conflicts=True)
        found = runs.filter(job_id__in={key[0] for key in planned},
                            scheduled_at__in={key[1] for key in planned}).values_list(
            "id", "job_id", "scheduled_at", "queue", "shard", "priority", "run_at", "state")
    pairs, refs = [], []
    for run_id, job_id, scheduled_at, queue, shard, priority, run_at, state in found:
        entry = planned.get((job_id, scheduled_at))
        if entry is None:
            continue
        pairs.append((entry[0], run_id))
        if state in PENDING_STATES:
            refs.append(RunRef(run_id, queue, shard, priority, run_at, entry[1]))
    moved = _point_at_runs(pairs, now, using)
    get_broker(using).push_after_commit(_continue(refs, now, using))
    return moved


def _continue(refs: list[RunRef], now: datetime, using: str) -> list[RunRef]:
    """Of the runs ``refs`` just made ready, lease those the acking worker offered to run
    at once in this transaction (runs/execution/continuation.py: due now, a queue it serves, no
    limit the broker's lease applies, none behind a more urgent run: continuation.choose,
    in the lease's order); returns the rest, for the broker. The runs were made in this
    transaction, so no other one can hold their rows: starting them here takes no lock
    out of the order runs, node runs, workflow run."""
    offer = continuation.current()
    if offer is None:
        return refs
    taken = continuation.take(continuation.choose(refs, now, using), using)
    rest = [ref for ref in refs if ref.id not in taken]
    offer.pushed += len(rest)
    return rest


def _insert_runs_pg(values: list[tuple], using: str, traces: list) -> list[tuple]:
    """Insert runs of ``values`` ((job id, scheduled_at, run_at, jitter_s, queue, shard,
    priority, max_attempts), UTC datetimes; ``traces`` their trace contexts, str or None) in one
    statement, skipping those whose (job, scheduled_at) exists, and return (id, job id,
    scheduled_at, queue, shard, priority, run_at, state) of the new and the existing ones
    alike. One INSERT ... SELECT from
    arrays rather than Django objects: building and inserting 998 ``Run`` objects took a
    fan-out's ack about 300 ms (BENCHMARKS.md, "Workflows (W7)")."""
    table = Run._meta.db_table
    columns = list(zip(*values, strict=True))
    # The existing rows are read in the INSERT's own snapshot, so they never include the
    # rows it inserts: each run comes back once, from one side or the other.
    sql = (
        f"WITH v AS (SELECT * FROM unnest(%s::bigint[], %s::timestamptz[], %s::timestamptz[],"
        " %s::float8[], %s::text[], %s::int[], %s::int[], %s::int[], %s::text[])"
        " AS v(job_id, scheduled_at, run_at, jitter_s, queue, shard, priority, max_attempts,"
        " trace)),"
        f" made AS (INSERT INTO {table} (job_id, scheduled_at, run_at, jitter_s, state, queue,"
        " shard, priority, attempt, max_attempts, worker_id, created_at, error, catch_up,"
        " trace_context) SELECT job_id, scheduled_at, run_at, jitter_s, %s, queue, shard,"
        " priority, 0, max_attempts, '', %s, '', false, trace FROM v ON CONFLICT DO NOTHING"
        " RETURNING id, job_id, scheduled_at, queue, shard, priority, run_at, state)"
        " SELECT * FROM made UNION ALL SELECT r.id, r.job_id, r.scheduled_at, r.queue,"
        f" r.shard, r.priority, r.run_at, r.state FROM {table} AS r JOIN v"
        " ON r.job_id = v.job_id AND r.scheduled_at = v.scheduled_at")
    with connections[using].cursor() as cursor:
        cursor.execute(sql, [int_array(columns[0]), list(columns[1]), list(columns[2]),
                             list(columns[3]), list(columns[4]), int_array(columns[5]),
                             int_array(columns[6]), int_array(columns[7]), traces,
                             RunState.SCHEDULED, timezone.now()])
        return cursor.fetchall()


def _point_at_runs(pairs: list[tuple[int, int]], now: datetime, using: str) -> set[int]:
    """Move each (node run id, run id) of ``pairs`` from pending to running with its run:
    one statement on PostgreSQL, one per node run elsewhere. Returns the ids of the
    workflow runs of the node runs moved (PostgreSQL; elsewhere none: the caller must
    then not count on it)."""
    if not pairs:
        return set()
    connection = connections[using]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {NodeRun._meta.db_table} AS n SET state = %s, run_id = v.run, "
                "ready_at = %s, error = '' FROM unnest(%s::bigint[], %s::bigint[]) "
                "AS v(id, run) WHERE n.id = v.id AND n.state = %s "
                "RETURNING n.workflow_run_id",
                [NodeState.RUNNING, now, int_array([p[0] for p in pairs]),
                 int_array([p[1] for p in pairs]), NodeState.PENDING])
            return {row[0] for row in cursor.fetchall()}
    node_runs = NodeRun.objects.using(using)
    for node_run_id, run_id in pairs:
        node_runs.filter(pk=node_run_id, state=NodeState.PENDING).update(
            state=NodeState.RUNNING, run_id=run_id, ready_at=now, error="")
    return set()


def downstream_of(node_ids, using: str) -> QuerySet:
    """The ids of the nodes that wait directly for any of ``node_ids``, as a subquery
    (start_ready's ``node_ids``): read inside its lock statement rather than in a round
    trip of its own, one fewer on every handoff (BENCHMARKS.md, "Workflows (W7)")."""
    return (WorkflowEdge.objects.using(using).filter(upstream_id__in=list(node_ids))
            .values("downstream_id"))


def finish_if_done(workflow_run_ids, now: datetime, using: str) -> list[int]:
    """End each running workflow run of ``workflow_run_ids`` none of whose nodes is
    pending or running: ``succeeded`` if every node succeeded or was skipped, else
    ``failed`` with the nodes that did not in ``error``. Returns the ids ended. A paused one is left
    paused, whatever its nodes did: its outcome is decided when it is resumed (resume
    calls this), so a requeue of its dead node revives it still paused
    (docs/workflows.md, "Cancel and pause")."""
    ids = set(workflow_run_ids)
    if not ids:
        return []
    if connections[using].in_atomic_block:
        # Held before its nodes are read (last in the lock order): of two acks of its last
        # two nodes at once, each saw the other's node running, uncommitted, and neither
        # ended it. Now the second waits, then reads the first's commit.
        list(WorkflowRun.objects.using(using).filter(pk__in=sorted(ids)).order_by("pk")
             .select_for_update().values_list("pk", flat=True))
    live_nodes = set(NodeRun.objects.using(using).filter(
        workflow_run_id__in=list(ids), state__in=[NodeState.PENDING, NodeState.RUNNING])
        .values_list("workflow_run_id", flat=True).distinct())
    done = ids - live_nodes
    if not done:
        return []
    unsuccessful: dict[int, list[tuple[str, str]]] = {}
    for wr_id, name, state in (NodeRun.objects.using(using)
                               .filter(workflow_run_id__in=list(done))
                               .exclude(state__in=FINE_NODE_STATES).order_by("id")
                               .values_list("workflow_run_id", "node__name", "state")):
        unsuccessful.setdefault(wr_id, []).append((name, state))
    runs = WorkflowRun.objects.using(using).filter(state=WorkflowRunState.RUNNING)
    ended = []
    for wr_id in sorted(done):
        failed = unsuccessful.get(wr_id)
        if failed:
            changed = runs.filter(pk=wr_id).update(
                state=WorkflowRunState.FAILED, finished_at=now, error=failure_summary(failed))
        else:
            changed = runs.filter(pk=wr_id).update(
                state=WorkflowRunState.SUCCEEDED, finished_at=now, error="")
        if changed:
            ended.append(wr_id)
    nesting.runs_ended(ended, now, using)  # a child's end ends its parent's node
    return ended


def failure_summary(failed: list[tuple[str, str]], shown: int = 10) -> str:
    """``error`` of a failed workflow run: its nodes that did not succeed, by state."""
    by_state: dict[str, list[str]] = {}
    for name, state in failed:
        by_state.setdefault(state, []).append(name)
    parts = []
    for state, names in by_state.items():
        more = f" and {len(names) - shown} more" if len(names) > shown else ""
        parts.append(f"{state}: {', '.join(repr(n) for n in names[:shown])}{more}")
    return "nodes that did not succeed: " + "; ".join(parts)
