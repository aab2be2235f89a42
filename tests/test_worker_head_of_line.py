"""A run that goes long in a child must not hold up the short runs handed to that child
behind it (docs/architecture.md, "runworker"): they are taken back and run by another
child. In-process workers on real PostgreSQL and Redis."""

import json
import os
import random
import signal
import time
from datetime import UTC, datetime, timedelta

import pytest

from jobs.registry import handler
from runs.clock import to_us
from runs.execution.transitions import run_refs
from runs.models import Attempt, AttemptOutcome, Run
from runs.types import Lease
from runs.worker import STALL_S, InFlight, Leased, Slot, Worker
from tests.conftest import make_runs

pytestmark = pytest.mark.django_db(transaction=True)

LONG_S = 3.0


@handler("tests.long_sleep")
def long_sleep(ctx, payload):
    """Sleep ``payload["s"]`` seconds."""
    time.sleep(payload["s"])


def push(broker, runs) -> None:
    broker.push(run_refs(Run.objects.filter(pk__in=[r.pk for r in runs])))


def test_short_runs_behind_a_run_gone_long_start_on_the_other_child(rb):
    # Short runs first, so the worker knows runs are short and hands each child many at
    # once; then one long run with more short runs due after it. The short runs handed to
    # the long run's child behind it used to wait for it to end (LONG_S).
    first = make_runs("default", 400, delay_s=-3)
    slow = make_runs("default", 1, handler="tests.long_sleep", payload={"s": LONG_S},
                     delay_s=-2)[0]
    after = make_runs("default", 400, delay_s=-1)
    for runs in (first, [slow], after):
        push(rb, runs)

    Worker(["default"], concurrency=2, burst=True).serve()

    slow = Run.objects.get(pk=slow.pk)
    assert slow.state == "succeeded"
    short = Run.objects.filter(pk__in=[r.pk for r in first + after])
    assert set(short.values_list("state", flat=True)) == {"succeeded"}
    # started_at is when the attempt was leased; a no-op run finishes as it starts. The
    # other child runs the rest in a fraction of a second; a run left behind the long one
    # would finish when it ends, LONG_S after it began.
    latest = max(short.values_list("finished_at", flat=True))
    assert (latest - slow.started_at).total_seconds() < LONG_S / 2, (
        f"a short run finished {(latest - slow.started_at).total_seconds():.2f} s after "
        f"the long run began")


def test_long_runs_among_short_ones_on_a_lone_child_are_not_released_over_and_over(rb):
    # Found by an adversarial review: releasing the runs leased ahead whenever every
    # child was in a long run (an earlier form of the take-back) released the same runs
    # again and again (2,780 released attempts here, max_attempts raised to 7), ran twice
    # as slowly, and let a burst worker exit with released runs still queued.
    for i in range(15):
        push(rb, make_runs("default", 150, delay_s=-20 + i))
        push(rb, make_runs("default", 1, handler="tests.long_sleep", payload={"s": 0.15},
                           delay_s=-19.5 + i))

    Worker(["default"], concurrency=1, burst=True).serve()

    assert set(Run.objects.values_list("state", flat=True)) == {"succeeded"}
    assert not Attempt.objects.filter(outcome=AttemptOutcome.RELEASED).exists()
    assert set(Run.objects.values_list("max_attempts", flat=True)) == {4}


def test_a_head_taken_back_before_its_child_started_it_leaves_no_bytes_counted():
    # A child starved of CPU (stopped here) has not started its first run after STALL_S:
    # it is taken back with the rest, and the bytes counted as waiting in its pipe go to
    # zero (the head's were counted off when it became the head; counting them off again
    # let the pipe take more than PIPE_BUDGET).
    worker = Worker(["default"], concurrency=1)
    worker.children.avg_run_s = 0.0001  # short runs: several are handed at once

    slot = Slot()
    os.kill(slot.process.pid, signal.SIGSTOP)
    try:
        now = time.time_ns() // 1000
        for i, pad in ((1, 20_000), (2, 100)):
            task = {"run_id": i, "job_id": 1, "attempt": 1, "scheduled_at": 0,
                    "handler": "noop", "payload": json.dumps({"pad": "x" * pad})}
            lease = Lease(i, 1, "default", 0, datetime.now(UTC))
            assert worker.lease.hand(slot, Leased(lease, task, 30), worker.lease.depth(), now)
        time.sleep(STALL_S + 0.05)
        assert slot.stalled(time.monotonic())

        back = slot.take_back()

        assert [run.seq for run in back] == [1, 2]
        assert not slot.queued and slot.waiting == 0
    finally:
        os.kill(slot.process.pid, signal.SIGCONT)
        slot.kill()


def test_a_run_taken_back_is_either_started_by_the_child_or_returned_never_both():
    # The race the lock settles: take_back at arbitrary moments while the child works
    # through a batch; every task is answered or returned, exactly once.
    slot = Slot()
    rng = random.Random(7)
    try:
        for _ in range(30):
            now = datetime.now(UTC)
            tasks = []
            for i in range(60):
                slot.seq += 1
                tasks.append({"run_id": slot.seq, "job_id": 1, "attempt": 1,
                              "seq": slot.seq, "scheduled_at": to_us(now),
                              "deadline": to_us(now + timedelta(seconds=30)),
                              "handler": "noop", "payload": json.dumps({"i": i})})
                slot.queued.append(InFlight(lease=None, task=tasks[-1], timeout_s=30,
                                            seq=slot.seq))
            slot.send(tasks)
            time.sleep(rng.random() * 0.003)
            back = {run.seq for run in slot.take_back()}
            answered = set()
            ends = time.monotonic() + 10
            # Wait for every task the child kept: the last one kept is answered last.
            kept = {t["seq"] for t in tasks} - back
            while kept - answered and time.monotonic() < ends:
                if slot.conn.poll(0.5):
                    answered |= {m[1] for m in slot.receive() if m[0] == "done"}
            time.sleep(0.01)
            while slot.conn.poll(0):
                answered |= {m[1] for m in slot.receive() if m[0] == "done"}
            assert answered | back == {t["seq"] for t in tasks}
            assert not answered & back
            slot.queued.clear()
    finally:
        slot.kill()
