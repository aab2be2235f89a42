"""Regressions found by an adversarial review of the fourth W2 pass (two leases in flight,
acks that batch themselves, lease.lua in chunks, the result check's fast path). In-process
workers on real PostgreSQL and Redis; each test failed before its fix."""

import os
import threading
import time
from collections import Counter
from datetime import UTC, datetime

import pytest
from django.db import connections

from jobs.registry import handler
from runs.execution.transitions import run_refs
from runs.models import Run
from runs.types import Lease, Outcome
from runs.worker import ACK_BATCH_MAX, Worker
from runs.worker.child import result_problem
from runs.worker.lanes import Lane
from tests.conftest import make_runs, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

HUGE = 10 ** 5000  # more digits than json.dumps writes (Python's int -> str limit: 4,300)


@handler("tests.huge_int")
def huge_int(ctx, payload):
    """Return an int json.dumps refuses."""
    return HUGE


def test_an_int_result_json_cannot_write_fails_its_run_and_the_worker_carries_on(rb):
    # The fast path took every int as storable; the ack's json.dumps then raised
    # ValueError out of the worker, leaving the runs it held running until their leases
    # lapsed (and spending an attempt of each).
    assert result_problem(HUGE) is not None
    ok = make_runs("default", 20)
    bad = make_runs("default", 1, handler="tests.huge_int", max_attempts=1)
    rb.push(run_refs(Run.objects.filter(pk__in=[r.pk for r in ok + bad])))

    Worker(["default"], concurrency=1, burst=True).serve(max_rounds=5000)

    assert Run.objects.get(pk=bad[0].pk).state == "dead"
    assert Counter(Run.objects.filter(pk__in=[r.pk for r in ok]).values_list(
        "state", flat=True)) == {"succeeded": 20}


def test_one_ack_carries_at_most_ACK_BATCH_MAX_outcomes():
    worker = Worker(["default"], concurrency=1)
    sizes = []

    def ack_call(outcomes):
        sizes.append(len(outcomes))
        return [True] * len(outcomes)

    worker.acks.ack_call = ack_call
    now = datetime.now(UTC)
    worker.acks.outcomes = [Outcome(lease=Lease(i, 1, "default", 0, now), outcome="succeeded")
                       for i in range(2000)]
    try:
        while worker.acks.busy():
            worker.acks.flush()
            for future, _ in worker.acks.acking:
                future.result(5)
            worker.acks.harvest()
    finally:
        worker.lanes.close()

    assert sum(sizes) == 2000
    assert max(sizes) <= ACK_BATCH_MAX, sizes


@pytest.mark.slow
def test_stopping_a_lane_closes_the_connection_of_a_thread_still_in_a_slow_call():
    # With a 5 s timeout on the closing barrier, the idle thread took both closing calls
    # and the slow thread's connection stayed open (a forked child would inherit it).
    _, wake = os.pipe()
    lane = Lane("t", wake, threads=2)
    opened = []
    both = threading.Barrier(2, timeout=5)

    def use_the_database(hold_s):
        connections["default"].ensure_connection()
        opened.append(connections["default"])
        both.wait()
        time.sleep(hold_s)

    slow = lane.submit(use_the_database, 6.0)
    lane.submit(use_the_database, 0.0).result(10)
    lane.stop()

    assert slow.done()
    assert all(c.connection is None for c in opened), [c.connection for c in opened]


def test_a_class_whose_last_run_waits_on_its_owner_does_not_hold_back_the_others(rb):
    # FAIR_SCAN=0 stops a lease at a run whose owner is at its limit. The chunked script
    # kept that class's pass low, so the other class's ready run was never leased while
    # the owner stayed at its limit (the per-run script let it through on the next call).
    prefix = os.environ["SCHEDULER_REDIS_PREFIX"]
    keys = [f"{prefix}:{{t}}:{name}"
            for name in ("ready", "leased", "owners", "fair", "parkedby", "running",
                         "limits", "bucket", "delayed", "parked", "parkedrun", "gates",
                         "buckets")]
    span = 4398046511104
    client = rb.client
    client.zadd(keys[0], {"1": 0 * span + 1000, "2": 5 * span + 1000})
    client.hset(keys[2], mapping={"1": "7"})  # run 1 belongs to owner 7 ...
    client.hset(keys[6], mapping={"o:7": 1})  # ... whose limit is 1 ...
    client.hset(keys[5], mapping={"o:7": 1})  # ... and who has one running
    client.hset(keys[3], mapping={"p1": 1, "p2": 2, "vt": 3})
    args = [10, 60000, "q", 0, 0, 0, 0, 0, 0, 4, 1, 5, 9, 1]
    lease = rb.sources["lease"]

    first = client.eval(lease, len(keys), *keys, *args)
    second = client.eval(lease, len(keys), *keys, *args)

    assert first == []
    assert [int(i) for i in second] == [2]


def test_a_call_queued_by_a_lane_call_runs_after_it_and_at_once_while_the_lane_stops():
    # The ack queues the broker's bookkeeping behind itself (runs/worker/acks.py); a
    # lane stopping (a child's replacement pauses the lanes) refused new calls, which
    # killed the worker ("cannot schedule new futures after shutdown").
    _, wake = os.pipe()
    lane = Lane("t", wake)
    order = []

    def first():
        lane.later(lambda: order.append("queued"))
        order.append("first")

    lane.submit(first).result(5)
    lane.submit(lambda: None).result(5)
    assert order == ["first", "queued"]

    inside, go = threading.Event(), threading.Event()

    def slow():
        inside.set()
        assert go.wait(5)
        lane.later(lambda: order.append("inline"))
        order.append("slow")

    future = lane.submit(slow)
    assert inside.wait(5)
    stopper = threading.Thread(target=lane.stop)
    stopper.start()
    wait_until(lambda: lane.stopping, timeout=5)
    go.set()
    stopper.join(5)
    future.result(5)
    assert order[2:] == ["inline", "slow"]
