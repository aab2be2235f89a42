"""A run that goes long in a child must not hold up the short runs handed to that child
behind it (docs/architecture.md, "runworker"): they are taken back and run by another
child. In-process workers on real PostgreSQL and Redis."""

import time

import pytest
from django.db import connections

from jobs.registry import handler
from runs.brokers import get_broker
from runs.models import Run
from runs.transitions import run_refs
from tests.conftest import flush_redis, make_runs

pytestmark = pytest.mark.django_db(transaction=True)

LONG_S = 3.0


@handler("tests.long_sleep")
def long_sleep(ctx, payload):
    """Sleep ``payload["s"]`` seconds."""
    time.sleep(payload["s"])


@pytest.fixture
def rb():
    flush_redis()
    broker = get_broker("default", name="redis")
    broker._known_at = float("-inf")  # cached across tests: re-read the shard list
    yield broker
    flush_redis()


def push(broker, runs) -> None:
    broker.push(run_refs(Run.objects.filter(pk__in=[r.pk for r in runs])))


def test_short_runs_behind_a_run_gone_long_start_on_the_other_child(rb):
    # Short runs first, so the worker knows runs are short and hands each child many at
    # once; then one long run with more short runs due after it. The short runs handed to
    # the long run's child behind it used to wait for it to end (LONG_S).
    from runs.worker import Worker

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



def test_when_the_only_child_is_in_a_long_run_the_runs_leased_ahead_are_released(rb):
    # One child, busy with a long run: the runs the worker leased ahead go back to the
    # broker for other workers while it lasts, instead of waiting for it.
    import threading

    from runs.models import Attempt, AttemptOutcome
    from runs.worker import Worker

    first = make_runs("default", 300, delay_s=-3)
    slow = make_runs("default", 1, handler="tests.long_sleep", payload={"s": LONG_S},
                     delay_s=-2)[0]
    after = make_runs("default", 600, delay_s=-1)
    for runs in (first, [slow], after):
        push(rb, runs)
    worker = Worker(["default"], concurrency=1, burst=True)

    def serve():
        try:
            worker.serve()
        finally:
            connections.close_all()  # this thread's own

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        released_while_slow_ran = False
        deadline = time.monotonic() + LONG_S + 5
        while time.monotonic() < deadline and not released_while_slow_ran:
            released = Attempt.objects.filter(outcome=AttemptOutcome.RELEASED).exists()
            released_while_slow_ran = released and (
                Run.objects.get(pk=slow.pk).state == "running")
            time.sleep(0.05)
    finally:
        thread.join(LONG_S + 30)
    assert released_while_slow_ran
    assert set(Run.objects.values_list("state", flat=True)) == {"succeeded"}
    # A released attempt does not use up a retry: each released run still has its budget.
    for run in Run.objects.filter(attempts__outcome=AttemptOutcome.RELEASED).distinct():
        times = run.attempts.filter(outcome=AttemptOutcome.RELEASED).count()
        assert run.max_attempts == 4 + times


def test_a_run_taken_back_is_either_started_by_the_child_or_returned_never_both():
    # The race the lock settles: take_back at arbitrary moments while the child works
    # through a batch; every task is answered or returned, exactly once.
    import json
    import random
    from datetime import UTC, datetime, timedelta

    from runs.clock import to_us
    from runs.worker import InFlight, Slot

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
