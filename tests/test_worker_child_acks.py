"""Acks in the child (runs/worker/handoff.py, runs/worker/child_acks.py): a workflow
node's success acked by the child that ran it, which then runs the downstream run the ack
continued. On every broker/database pair: where the child may not ack (SQLite), the
worker acks as before, and the graph ends the same. What must hold whatever the path:
every node run once, in order, with one attempt; a child killed in the middle of its
ack loses nothing (the worker acks the success it was told of, fenced)."""

import os
import signal
import threading
import time

import pytest
from django.db import connections

from jobs.registry import handler
from runs.models import Attempt, LogLine, Run
from runs.worker import Worker
from workflows import services
from workflows.models import NodeRun, WorkflowRun

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])

CHAIN = 12


@handler("childack.stamp")
def stamp(ctx, payload):
    return time.time()


@handler("childack.pid")
def pid(ctx, payload):
    return os.getpid()


def chain(name: str, n: int, using: str, handler_name: str = "childack.stamp"):
    nodes = [{"name": f"n{i}", "handler": handler_name} for i in range(n)]
    edges = [[f"n{i}", f"n{i + 1}"] for i in range(n - 1)]
    return services.create_workflow(name, nodes, edges, using=using)


def node_rows(workflow_run, using: str) -> dict[str, tuple]:
    return {name: (state, run_id) for name, state, run_id in NodeRun.objects.using(using)
            .filter(workflow_run=workflow_run).values_list("node__name", "state", "run_id")}


@pytest.mark.parametrize("child_acks", [True, False], ids=["child acks", "worker acks"])
def test_a_chain_runs_each_node_once_in_order_acked_where_the_database_allows(
        broker, settings, child_acks):
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name,
                          "WORKER_CHILD_ACKS": child_acks}
    workflow = chain("chain", CHAIN, broker.using)
    workflow_run = services.start_workflow_run(workflow, using=broker.using)
    broker.promote()

    worker = Worker(["default"], concurrency=2, using=broker.using, burst=True)
    worker.serve()

    rows = node_rows(workflow_run, broker.using)
    assert {state for state, _ in rows.values()} == {"succeeded"}
    assert WorkflowRun.objects.using(broker.using).get(pk=workflow_run.pk).state == "succeeded"
    runs = {r.pk: r for r in Run.objects.using(broker.using).filter(
        pk__in=[run_id for _, run_id in rows.values()])}
    assert {r.attempt for r in runs.values()} == {1}
    assert Attempt.objects.using(broker.using).filter(run_id__in=runs).count() == CHAIN
    stamps = [runs[rows[f"n{i}"][1]].result for i in range(CHAIN)]
    assert stamps == sorted(stamps), "a node ran before its upstream"
    assert worker.finished == CHAIN
    postgres = connections[broker.using].vendor == "postgresql"
    if child_acks and postgres:
        # The root is leased from the broker and acked by the worker (its run is not
        # known to be a node's until then); the hops after it can be the child's.
        assert worker.acked_in_children >= CHAIN // 2
    else:
        assert worker.acked_in_children == 0


def test_a_child_killed_in_its_ack_loses_nothing_the_worker_acks_its_success(
        broker, settings):
    """The second node's ack is held up on a lock the test takes on the third node's
    node run; the child acking is SIGKILLed there. The worker acks the second node's
    success itself (the child told it before its ack), the chain goes on."""
    if connections[broker.using].vendor != "postgresql":
        pytest.skip("children ack only on PostgreSQL")
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name,
                          "LEASE_TTL_S": 2.0, "RETRY_BACKOFF_BASE_S": 0.1}
    workflow = chain("killed", 4, broker.using, "childack.pid")
    workflow_run = services.start_workflow_run(workflow, using=broker.using)
    broker.promote()
    third = NodeRun.objects.using(broker.using).get(workflow_run=workflow_run,
                                                    node__name="n2")
    worker = Worker(["default"], concurrency=1, using=broker.using, burst=True)
    killed: list[int] = []
    locked = threading.Event()
    release = threading.Event()

    def hold_the_third_node_and_kill_the_acking_child():
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("SELECT id FROM workflows_noderun WHERE id = %s FOR UPDATE",
                           [third.pk])
            locked.set()
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                slot = worker.slots[0] if worker.slots else None
                current = slot.current if slot else None
                if (current is not None and current.pending is not None
                        and current.lease.run_id == second_run_id()):
                    killed.append(slot.process.pid)
                    os.kill(slot.process.pid, signal.SIGKILL)
                    time.sleep(0.2)
                    break
                time.sleep(0.005)
            release.wait(0.2)
            cursor.execute("ROLLBACK")
        connection.close()

    def second_run_id():
        return NodeRun.objects.using(broker.using).filter(
            workflow_run=workflow_run, node__name="n1").values_list("run_id", flat=True)[0]

    holder = threading.Thread(target=hold_the_third_node_and_kill_the_acking_child)
    holder.start()
    assert locked.wait(5)
    worker.serve()
    release.set()
    holder.join(30)

    assert killed, "the child was never seen acking the second node"
    # The killed child's database session may still commit its ack once the lock goes
    # (PostgreSQL sees its client gone only when it answers): then the worker's own ack
    # is refused as stale, and the run that ack continued on the worker waits for its
    # lease to expire, as a dead worker's does. The reaper retries it.
    time.sleep(2.2)
    broker.reap()
    time.sleep(0.5)  # its backoff
    broker.promote()
    Worker(["default"], concurrency=1, using=broker.using, burst=True).serve()

    rows = node_rows(workflow_run, broker.using)
    assert {state for state, _ in rows.values()} == {"succeeded"}, [
        (name, state, list(Attempt.objects.using(broker.using).filter(run_id=run_id)
                           .values_list("number", "outcome", "worker_id", "started_at")),
         Run.objects.using(broker.using).filter(pk=run_id).values_list(
             "state", "lease_expires_at", "run_at").first())
        for name, (state, run_id) in sorted(rows.items())]
    assert WorkflowRun.objects.using(broker.using).get(pk=workflow_run.pk).state == "succeeded"
    second = Run.objects.using(broker.using).get(pk=rows["n1"][1])
    # Acked once, by the child's session or by the worker, with the child's result.
    assert second.attempt == 1
    assert second.result == killed[0]
    for _, run_id in rows.values():
        outcomes = list(Attempt.objects.using(broker.using).filter(run_id=run_id)
                        .order_by("number").values_list("outcome", flat=True))
        # Every run once, or again after a lease that expired, never otherwise.
        assert outcomes in (["succeeded"], ["lease_expired", "succeeded"]), outcomes


def backend_pid_in_a_fork(forget: bool) -> int:
    """Fork as the worker forks a replacement child, with the parent's connection open;
    the child's pg_backend_pid() (after forget_inherited_connections when ``forget``)."""
    import multiprocessing

    from runs.worker.child import forget_inherited_connections

    fork = multiprocessing.get_context("fork")
    parent_end, child_end = fork.Pipe()

    def child():
        if forget:
            forget_inherited_connections()
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            child_end.send(cursor.fetchone()[0])
        os._exit(0)

    process = fork.Process(target=child)
    process.start()
    assert parent_end.poll(10)
    found = parent_end.recv()
    process.join(5)
    return found


@pytest.mark.django_db(transaction=True)
def test_a_replacement_child_opens_a_database_session_of_its_own():
    """A child forked to replace one that died inherits the worker's open connection
    objects; its handler's queries, and its acks, must not write into the worker's
    session (runs/worker/child.py, forget_inherited_connections). Without the forget, the
    fork's query went out on the worker's own socket."""
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        mine = cursor.fetchone()[0]
    assert backend_pid_in_a_fork(forget=True) != mine
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        assert cursor.fetchone()[0] == mine  # and the worker's session is still whole


# --- what an adversarial review found (each failed before its fix) -------------------


@handler("childack.log_then_sleep")
def log_then_sleep(ctx, payload):
    ctx.logger.info("hello from %s", ctx.run_id)
    time.sleep(0.4)  # past LOG_STREAM_S: the line is streamed to the worker before the end
    return 1


def test_a_node_whose_log_lines_were_streamed_keeps_them(broker, settings):
    """The lines a run streamed while it ran are not in its ``done``: a child that
    acked it as a run without lines dropped them. Such a run goes to the worker."""
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name}
    workflow = chain("logs", 3, broker.using, "childack.log_then_sleep")
    workflow_run = services.start_workflow_run(workflow, using=broker.using)
    broker.promote()
    Worker(["default"], concurrency=1, using=broker.using, burst=True).serve()
    lines = {name: LogLine.objects.using(broker.using).filter(attempt__run_id=run_id).count()
             for name, (_, run_id) in node_rows(workflow_run, broker.using).items()}
    assert lines == {"n0": 1, "n1": 1, "n2": 1}


@handler("childack.leave_transaction_open")
def leave_transaction_open(ctx, payload):
    with connections[ctx.using].cursor() as cursor:
        if payload.get("how") == "begin":
            cursor.execute("BEGIN")
        else:
            connections[ctx.using].set_autocommit(False)
            cursor.execute("SELECT 1")
    return 1


@pytest.mark.parametrize("how", ["begin", "autocommit off"])
def test_a_handler_that_leaves_a_transaction_open_does_not_swallow_the_acks(
        broker, settings, how):
    """The child's ack inside the handler's transaction never committed: the worker
    reported successes the database never had. The child now closes such a session
    (rolling the handler's work back) and leaves the ack to its worker."""
    if connections[broker.using].vendor != "postgresql":
        pytest.skip("children ack only on PostgreSQL")
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name}
    nodes = [{"name": "n0", "handler": "childack.stamp"},
             {"name": "n1", "handler": "childack.leave_transaction_open",
              "payload": {"how": "begin" if how == "begin" else "off"}},
             {"name": "n2", "handler": "childack.stamp"},
             {"name": "n3", "handler": "childack.stamp"}]
    workflow = services.create_workflow(
        "open", nodes, [["n0", "n1"], ["n1", "n2"], ["n2", "n3"]], using=broker.using)
    workflow_run = services.start_workflow_run(workflow, using=broker.using)
    broker.promote()
    worker = Worker(["default"], concurrency=1, using=broker.using, burst=True)
    worker.serve()
    rows = node_rows(workflow_run, broker.using)
    assert {state for state, _ in rows.values()} == {"succeeded"}, rows
    assert worker.finished == 4


def test_the_books_of_several_hops_leave_no_finished_run_leased_in_redis(broker, settings):
    """Merged, the books forgot every finished run before adopting every continued one:
    a run one hop continued and the next finished was left leased in Redis, and counted
    running in its queue."""
    if broker.name != "redis" or connections[broker.using].vendor != "postgresql":
        pytest.skip("the Redis broker's leased sets, children acking on PostgreSQL")
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name}
    workflow = chain("books", 60, broker.using)
    workflow_run = services.start_workflow_run(workflow, using=broker.using)
    broker.promote()
    Worker(["default"], concurrency=1, using=broker.using, burst=True).serve()
    assert {state for state, _ in node_rows(workflow_run, broker.using).values()} == {
        "succeeded"}
    left = [member for shard in broker._known_shards("default")
            for member in broker.client.zrange(broker.keys.leased("default", shard), 0, -1)]
    assert left == []
    assert int(broker.client.hget(broker.keys.running("default"), "q:default") or 0) == 0


def test_merged_books_cancel_a_run_continued_then_finished():
    from datetime import UTC, datetime

    from runs.types import Books, Lease
    from runs.worker.child_acks import merge_books

    def lease(run_id):
        return Lease(run_id, 1, "default", 0, datetime.now(UTC))

    merged = merge_books([Books([(1, "default", 0)], [(lease(2), None)], 60.0, []),
                          Books([(2, "default", 0)], [(lease(3), 7)], 60.0, [9])])
    assert merged.finished == [(1, "default", 0)]
    assert [(t.run_id, owner) for t, owner in merged.taken] == [(3, 7)]
    assert merged.retried == [9]


def test_a_child_dead_holding_its_control_lock_does_not_hang_the_worker():
    """Handing a task now takes the child's control lock: a child killed holding it
    (the OOM killer, in take_task or claim) blocked the worker for ever."""
    from runs.worker.pool import FORK, Slot

    slot = Slot()
    try:
        def die_holding():
            slot.lock.acquire()
            os._exit(0)

        holder = FORK.Process(target=die_holding)
        holder.start()
        holder.join(5)
        answers = {}
        thread = threading.Thread(target=lambda: answers.update(
            seq=slot.next_seq(), allowed=slot.allow(True)), daemon=True)
        thread.start()
        thread.join(3)
        assert not thread.is_alive(), "the worker blocked on the lock"
        assert answers == {"seq": None, "allowed": None}
        assert slot.lock_lost and not slot.allowed
        slot.process.join(2)
        assert not slot.process.is_alive()  # killed, for the worker to replace
    finally:
        slot.kill()
