"""The order of a child's two pipes (runs/worker/wire.py, in_order): an ``acking`` sent on
the quiet pipe after a ``done`` sent on the main pipe is handled after it, however the two
are read. Read the other way, the ``acking`` was about a run not yet the child's current
one and went unheard; the ``acked`` that followed then crashed the worker's round
(``current.pending`` None), the messages read with it were lost, and the runs the child
had run after it were handed again when the stuck run's timeout replaced the child: one
attempt executed twice by the worker holding its lease (chaos workflow-kill)."""

import os
import threading
import time

import pytest
from django.db import connection, connections

from jobs.registry import handler
from runs.models import Attempt, Run
from runs.worker import Worker, handoff, wire
from runs.worker.lease_ahead import leased_of
from runs.worker.pool import InFlight
from workflows import services
from workflows.models import NodeRun

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


@handler("quietorder.ok")
def ok(ctx, payload):
    return payload.get("n", 1)


def test_quiet_messages_are_put_back_after_the_main_ones_sent_before_them():
    held = [(0, ("acking", 1)), (1, ("acking", 2)), (1, ("acked", 2)), (3, ("acked", 3))]
    ordered, read = wire.in_order(held, [("done", 9), ("done", 10)], 0)
    assert ordered == [("acking", 1), ("done", 9), ("acking", 2), ("acked", 2),
                       ("done", 10)]
    assert read == 2 and held == [(3, ("acked", 3))]
    ordered, read = wire.in_order(held, [("log", 11)], read)
    assert ordered == [("log", 11), ("acked", 3)] and not held


def one_node(name: str, using: str):
    workflow = services.create_workflow(name, [{"name": "n0", "handler": "quietorder.ok"}],
                                        [], using=using)
    workflow_run = services.start_workflow_run(workflow, using=using)
    return NodeRun.objects.using(using).get(workflow_run=workflow_run, node__name="n0")


def quiet_frames(slot) -> int:
    """Frames waiting in ``slot``'s quiet pipe, read into its buffer, not decoded."""
    try:
        while chunk := os.read(slot.quiet_fd, 1 << 16):
            slot.quiet_received += chunk
    except BlockingIOError:
        pass
    data, count, at = bytes(slot.quiet_received), 0, 0
    while len(data) - at >= wire.QUIET_HEADER.size:
        size, _ = wire.QUIET_HEADER.unpack_from(data, at)
        if len(data) - at - wire.QUIET_HEADER.size < size:
            break
        count, at = count + 1, at + wire.QUIET_HEADER.size + size
    return count


def until(predicate, what: str, timeout: float = 20):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_an_acking_read_before_the_done_sent_ahead_of_it_is_heard(broker, settings):
    """One child is handed X (a plain run: ``done`` on the main pipe) then Y (a workflow
    node it acks itself: ``acking``, ``acked`` on the quiet pipe). Y's ack is held on a
    lock on its node run, so the worker reads ``acking`` Y together with ``done`` X, and
    ``acked`` Y in a later round, as in the chaos run."""
    if connections[broker.using].vendor != "postgresql":
        pytest.skip("children ack only on PostgreSQL")
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name}
    node_x, node_y = one_node("x", broker.using), one_node("y", broker.using)
    broker.promote()
    worker = Worker(["default"], concurrency=1, using=broker.using)
    worker.child_acks.enable(handoff.Handoff(worker.worker_id, ("default",), 60.0,
                                             broker.using, broker.name))
    connections.close_all()
    worker.children.start(1, worker.child_acks.handoff, 0)
    slot = worker.slots[0]
    locked, release = threading.Event(), threading.Event()

    def hold_y():
        with connection.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("SELECT id FROM workflows_noderun WHERE id = %s FOR UPDATE",
                           [node_y.pk])
            locked.set()
            release.wait(30)
            cursor.execute("ROLLBACK")
        connection.close()

    holder = threading.Thread(target=hold_y)
    holder.start()
    try:
        assert locked.wait(10)
        leases = broker.lease(["default"], 2, worker.worker_id)
        by_run = {run.lease.run_id: run for run in leased_of(leases, broker.using)}
        x, y = by_run[node_x.run_id], by_run[node_y.run_id]
        y.watched = True  # a node's run the engine made: its child may ack it
        worker.child_acks.allow()
        assert slot.allowed
        now = time.time_ns() // 1000
        slot.send([worker.lease.hand(slot, x, 2, now), worker.lease.hand(slot, y, 2, now)])

        # X's done is on the main pipe, Y's acking on the quiet pipe; Y's ack waits.
        until(lambda: quiet_frames(slot) == 1 and slot.conn.poll(), "acking Y")
        worker.supervisor.collect(0)
        assert [run.lease.run_id for run in slot.queued] == [y.lease.run_id]
        assert slot.current.pending is not None, "the acking of Y went unheard"

        release.set()
        until(lambda: quiet_frames(slot) == 1, "acked Y")  # acking Y was decoded
        worker.supervisor.collect(0)  # raised AttributeError: current.pending was None
        assert not slot.queued
        assert worker.acked_in_children == 1
        assert [o.lease.run_id for o in worker.acks.outcomes] == [x.lease.run_id]
        worker.acks.drain()
        worker.books.settle()
    finally:
        release.set()
        holder.join(30)
        worker.children.kill()
        worker.lanes.close()

    for run_id in (x.lease.run_id, y.lease.run_id):
        assert Run.objects.using(broker.using).get(pk=run_id).state == "succeeded"
        assert list(Attempt.objects.using(broker.using).filter(run_id=run_id)
                    .values_list("number", "outcome")) == [(1, "succeeded")]


def test_a_replaced_child_s_started_runs_are_never_handed_again(broker, settings):
    """A run the child started behind the head, whose outcome the worker never read, is
    not handed to another child when the child is replaced: it ends crashed (a new
    attempt, by the retry policy), never a second execution of the same attempt."""
    if connections[broker.using].vendor != "postgresql":
        pytest.skip("one database suffices: this is the worker's own bookkeeping")
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name}
    node_x, node_y = one_node("x", broker.using), one_node("y", broker.using)
    broker.promote()
    worker = Worker(["default"], concurrency=1, using=broker.using)
    connections.close_all()
    worker.children.start(1, None, 0)
    slot = worker.slots[0]
    try:
        leases = broker.lease(["default"], 2, worker.worker_id)
        by_run = {run.lease.run_id: run for run in leased_of(leases, broker.using)}
        x, y = by_run[node_x.run_id], by_run[node_y.run_id]
        now = time.time_ns() // 1000
        slot.send([worker.lease.hand(slot, x, 2, now), worker.lease.hand(slot, y, 2, now)])
        until(lambda: slot.control[0] == slot.queued[1].seq, "Y started")
        # As if its messages were lost: the worker still holds X as running, and cuts
        # it off (its timeout), replacing the child.
        worker.supervisor.replace(slot)
        assert not len(worker.ahead), "a run the child had started was handed again"
        assert [run.lease.run_id for run in worker.children.orphans] == [y.lease.run_id]
        assert isinstance(worker.children.orphans[0], InFlight)
    finally:
        worker.children.kill()
        worker.lanes.close()
