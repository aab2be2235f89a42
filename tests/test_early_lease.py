"""A run leased just before its time (docs/performance.md, "Starting a run at its time"):
an idle worker promotes the run it sleeps to a few ms early (Broker.promote's
``within_s``, at most EARLY_MAX_S), its attempt starts at the run's run_at, and the child
waits for that instant before the handler (runs/worker/child.py, not_yet_s). On the
PostgreSQL pairs, where the worker does it (one statement starts the attempt)."""

import time
from datetime import timedelta

import pytest
from django.db import connections
from django.db.models import F

from runs.execution.leases import EARLY_MAX_S
from runs.execution.transitions import run_refs
from runs.models import Run
from runs.worker.child import not_yet_s
from tests.conftest import make_runs

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


def pushed(broker, delay_s: float) -> Run:
    [run] = make_runs(broker.using, 1, delay_s=delay_s)
    broker.push(run_refs(Run.objects.using(broker.using).filter(pk=run.pk)))
    return run


def test_a_promote_within_a_few_ms_leases_a_run_whose_attempt_starts_at_its_run_at(broker):
    if connections[broker.using].vendor != "postgresql":
        pytest.skip("workers lease early only where one statement starts the attempt")
    soon = pushed(broker, delay_s=0.04)

    broker.promote(queues=["default"], within_s=EARLY_MAX_S)
    [lease] = broker.lease(["default"], 1, "w1")

    started = Run.objects.using(broker.using).get(pk=soon.pk)
    assert lease.run_id == soon.pk and started.started_at >= started.run_at
    if started.started_at == started.run_at:  # leased before its time: the child waits
        assert lease.task["not_before"] >= soon.run_at.timestamp()  # one clock here
        assert lease.task["not_before"] - time.time() <= EARLY_MAX_S
    else:  # the lease came after its time (a slow machine): nothing to wait for
        assert lease.task["not_before"] is None


def test_a_promote_moves_no_run_due_later_than_the_most_it_may_lease_early(broker):
    later = pushed(broker, delay_s=1.0)

    moved = broker.promote(queues=["default"], within_s=5.0)

    assert moved == 0 and broker.lease(["default"], 1, "w1") == []
    assert Run.objects.using(broker.using).get(pk=later.pk).state == "scheduled"


def test_a_child_waits_until_its_tasks_not_before_and_no_longer_than_the_most_early():
    now = time.time()

    assert 0.0 < not_yet_s({"not_before": now + 0.03}) <= 0.03
    assert not_yet_s({"not_before": now + 10.0}) == EARLY_MAX_S
    assert not_yet_s({"not_before": now - 0.005}) == 0.0
    assert not_yet_s({"not_before": None}) == not_yet_s({}) == 0.0


def test_a_run_released_after_an_early_lease_keeps_its_run_at(broker):
    """A stopping worker releases the runs it leased ahead: a release set run_at to now,
    so another worker would have started an early-leased run before its time."""
    if connections[broker.using].vendor != "postgresql":
        pytest.skip("workers lease early only where one statement starts the attempt")
    soon = pushed(broker, delay_s=EARLY_MAX_S * 0.8)
    broker.promote(queues=["default"], within_s=EARLY_MAX_S)
    leases = broker.lease(["default"], 1, "w1")
    # Still ahead at the release whatever this machine's load: the lease's 40 ms may
    # have passed by now.
    runs = Run.objects.using(broker.using).filter(pk=soon.pk)
    runs.update(run_at=F("run_at") + timedelta(seconds=30))
    ahead = runs.get().run_at

    broker.release(leases)

    assert leases and runs.get().run_at == ahead


def test_a_nudge_ends_the_lease_lanes_sleep_to_the_next_runs_time(settings):
    """An ack that may have made runs (a workflow's) nudges the worker (Ahead.wake with
    retry): the lease lane sleeping to its next run's time leases at once. On SQLite,
    where nothing else can wake it, it slept to that time."""
    import threading

    from runs.worker import Worker

    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": "database", "WORKER_POLL_S": 5}
    worker = Worker(["default"], concurrency=1, using="sqlite")
    answer = []

    def lease_lane():
        try:
            answer.append(worker.lease.lease_at(time.monotonic() + 3.0, 1))
        finally:
            connections.close_all()  # this thread's own

    lane = threading.Thread(target=lease_lane)
    lane.start()
    time.sleep(0.2)
    worker.ahead.wake(retry=True)
    lane.join(timeout=1.5)

    assert not lane.is_alive() and answer == [([], 0.0)]


def test_an_idle_worker_leases_its_next_run_early_and_its_child_waits_for_its_time(
        broker, settings):
    """The lease lane wakes EARLY_S before the run (runs/worker/lease_ahead.py, lease_at)
    and the task tells the child when to start: never before the run's run_at (here the
    database's clock and this host's are one)."""
    if connections[broker.using].vendor != "postgresql":
        pytest.skip("workers lease early only where one statement starts the attempt")
    from runs.worker import Worker

    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name, "WORKER_POLL_S": 1}
    soon = pushed(broker, delay_s=0.3)
    worker = Worker(["default"], concurrency=1, using=broker.using)

    try:
        [run], _ = worker.lease.lease_call(1)
    finally:
        worker.broker.end_waits()  # the database broker's listen connection

    started = Run.objects.using(broker.using).get(pk=soon.pk)
    assert run.lease.run_id == soon.pk and started.started_at >= soon.run_at
    if started.started_at == soon.run_at:  # leased before its time
        assert run.task["not_before"] >= soon.run_at.timestamp()  # one clock here
        assert run.task["not_before"] - time.time() <= EARLY_MAX_S


def test_a_childs_wait_for_its_run_is_not_counted_as_the_runs_time():
    """The run's time (the outcome's took_s, the worker's avg_run_s that sizes its
    lease-ahead) starts when the handler does, not when the child began to wait."""
    from runs.worker import child

    now = time.time()
    task = {"run_id": 1, "job_id": 1, "attempt": 1, "scheduled_at": int(now * 1e6),
            "deadline": int((now + 60) * 1e6), "handler": "noop", "payload": "{}",
            "seq": 1, "not_before": now + 0.05}

    done = child.execute(task, child.CaptureHandler(10), lambda message: None)

    ok, began, finished = done[3], done[7], done[8]
    assert ok and time.time() >= now + 0.05 and finished - began < 0.025


def test_a_nudge_between_the_empty_lease_and_the_sleep_is_heard(settings):
    """An ack that may have made runs can land after lease_call's empty lease and before
    lease_at's sleep: lease_at cleared the nudge on entry and slept to the run's time."""
    from runs.worker import Worker

    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": "database", "WORKER_POLL_S": 5}
    worker = Worker(["default"], concurrency=1, using="sqlite")
    worker.ahead.wake(retry=True)
    began = time.monotonic()
    answer = worker.lease.lease_at(began + 3.0, 1)  # on SQLite: no query, no listen

    assert answer == ([], 0.0) and time.monotonic() - began < 1.5
