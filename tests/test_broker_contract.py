"""The broker contract (runs/brokers/base.py), run against every broker/database pair:
redis on PostgreSQL, the database broker on PostgreSQL, the database broker on SQLite."""

import json
import subprocess
import sys
import time
from datetime import timedelta

import pytest

from jobs import services
from runs.clock import db_now
from runs.execution.transitions import run_refs
from runs.models import Attempt, AttemptOutcome, Run, RunState
from runs.types import Outcome
from tests.conftest import ROOT, daemon_env, flush_redis, make_runs

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


def push(broker, runs):
    broker.push(run_refs(Run.objects.using(broker.using).filter(pk__in=[r.pk for r in runs])))


def run(broker, run_id) -> Run:
    return Run.objects.using(broker.using).get(pk=run_id)


def lease_one(broker, worker="w1", ttl_s=None, **run_options):
    """Create one due run, push and promote it, and lease it to ``worker``."""
    [r] = make_runs(broker.using, 1, **run_options)
    push(broker, [r])
    broker.promote()
    [lease] = broker.lease(["default"], 1, worker, ttl_s=ttl_s)
    return r, lease


def test_lease_orders_by_priority_then_run_at(broker):
    low = make_runs(broker.using, 2, priority=9, delay_s=-5)
    urgent_late = make_runs(broker.using, 1, priority=0, delay_s=-1)
    urgent_early = make_runs(broker.using, 1, priority=0, delay_s=-3)
    normal = make_runs(broker.using, 1, priority=5, delay_s=-4)
    push(broker, low + urgent_late + urgent_early + normal)
    broker.promote()

    leases = broker.lease(["default"], 10, "w1")

    assert [lease.run_id for lease in leases] == [
        urgent_early[0].pk, urgent_late[0].pk, normal[0].pk, low[0].pk, low[1].pk]
    assert all(lease.attempt == 1 for lease in leases)


def test_a_run_is_not_leased_before_it_is_due(broker):
    [future] = make_runs(broker.using, 1, delay_s=1.5)
    push(broker, [future])

    broker.promote()
    assert broker.lease(["default"], 5, "w1") == []

    time.sleep(1.6)
    broker.promote()
    [lease] = broker.lease(["default"], 5, "w1")
    assert lease.run_id == future.pk
    assert run(broker, future.pk).started_at >= future.scheduled_at


@pytest.mark.slow
def test_racing_processes_promote_and_lease_every_run_exactly_once(broker):
    runs = make_runs(broker.using, 400, delay_s=2.0)
    push(broker, runs)
    env = daemon_env(broker.name, broker.using)

    racers = [
        subprocess.Popen([sys.executable, "-m", "tests.race_client", "4", "7", "-"], env=env,
                         cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
        for _ in range(4)
    ]
    # Every racer connected before any leases: on a loaded machine one racer's start-up
    # could otherwise outlast the whole race ("only one participant").
    for racer in racers:
        racer.stdout.readline()
    for racer in racers:
        try:
            racer.stdin.write(b"go\n")
            racer.stdin.flush()
        except BrokenPipeError:
            pass  # it has ended already: its exit status below says why
    outputs = [racer.communicate(timeout=120) for racer in racers]

    assert all(racer.returncode == 0 for racer in racers), [o[1][-2000:] for o in outputs]
    per_racer = [json.loads(out.decode().strip().splitlines()[-1]) for out, _ in outputs]
    leased = [run_id for ids in per_racer for run_id in ids]
    assert sorted(leased) == sorted(r.pk for r in runs)
    assert len(set(leased)) == len(leased)
    assert sum(1 for ids in per_racer if ids) >= 2, "the race had only one participant"
    assert Attempt.objects.using(broker.using).count() == 400


def test_expired_lease_is_reaped_and_retried_with_backoff(broker):
    r, lease = lease_one(broker, ttl_s=0.5)

    time.sleep(0.7)
    assert broker.reap() == 1

    reaped = run(broker, r.pk)
    assert reaped.state == RunState.RETRYING
    attempt = Attempt.objects.using(broker.using).get(run=r, number=1)
    assert attempt.outcome == AttemptOutcome.LEASE_EXPIRED
    assert reaped.run_at - attempt.finished_at == timedelta(seconds=1)
    assert "stopped heartbeating" in reaped.error


def test_heartbeat_extends_a_lease(broker):
    r, lease = lease_one(broker, ttl_s=1.0)

    time.sleep(0.6)
    [held] = broker.heartbeat([lease], ttl_s=3.0)
    time.sleep(0.8)

    assert broker.reap() == 0
    assert held.expires_at > lease.expires_at
    assert run(broker, r.pk).state == RunState.RUNNING


def test_heartbeat_reports_a_lost_lease(broker):
    r, lease = lease_one(broker, ttl_s=0.3)
    time.sleep(0.5)
    broker.reap()

    assert broker.heartbeat([lease]) == []


def test_stale_ack_after_lease_expiry_is_refused(broker):
    r, stale = lease_one(broker, "slow-worker", ttl_s=0.3)
    time.sleep(0.5)
    broker.reap()
    Run.objects.using(broker.using).filter(pk=r.pk).update(run_at=db_now(broker.using))
    push(broker, [r])
    broker.promote()
    [fresh] = broker.lease(["default"], 1, "fast-worker")

    late = broker.complete([Outcome(stale, AttemptOutcome.SUCCEEDED, result={"by": "stale"},
                                    logs=[(db_now(broker.using), 20, "t", "late line")])])
    current = broker.complete([Outcome(fresh, AttemptOutcome.SUCCEEDED, result={"by": "fresh"})])

    assert late == [False]
    assert current == [True]
    done = run(broker, r.pk)
    assert (done.state, done.attempt, done.result) == (RunState.SUCCEEDED, 2, {"by": "fresh"})
    outcomes = list(Attempt.objects.using(broker.using).filter(run=r).order_by("number")
                    .values_list("number", "outcome", "worker_id"))
    assert outcomes == [(1, "lease_expired", "slow-worker"), (2, "succeeded", "fast-worker")]
    first = Attempt.objects.using(broker.using).get(run=r, number=1)
    assert [line.message for line in first.log_lines.all()] == ["late line"]


def test_failures_retry_after_1_2_4_8_seconds_then_dead_letter(broker):
    [r] = make_runs(broker.using, 1, max_attempts=5)
    push(broker, [r])
    delays = []
    for attempt in range(1, 6):
        broker.promote()
        [lease] = broker.lease(["default"], 1, "w1")
        assert lease.attempt == attempt
        assert broker.complete([Outcome(lease, AttemptOutcome.FAILED, error=f"boom {attempt}")])
        after = run(broker, r.pk)
        if after.state == RunState.RETRYING:
            finished = Attempt.objects.using(broker.using).get(run=r, number=attempt).finished_at
            delays.append((after.run_at - finished).total_seconds())
            # Skip the wait itself: the contract is the recorded retry time.
            Run.objects.using(broker.using).filter(pk=r.pk).update(run_at=db_now(broker.using))
            push(broker, [after])

    assert delays == [1.0, 2.0, 4.0, 8.0]
    dead = run(broker, r.pk)
    assert (dead.state, dead.attempt, dead.error) == (RunState.DEAD, 5, "boom 5")
    assert dead.finished_at is not None
    assert broker.lease(["default"], 1, "w1") == []


def test_release_hands_a_run_back_at_once_without_spending_an_attempt(broker):
    r, lease = lease_one(broker, "leaving-worker", max_attempts=1)

    assert broker.release([lease]) == [r.pk]
    broker.promote()
    [again] = broker.lease(["default"], 1, "other-worker")
    assert broker.complete([Outcome(again, AttemptOutcome.SUCCEEDED)]) == [True]

    done = run(broker, r.pk)
    assert (done.state, done.attempt) == (RunState.SUCCEEDED, 2)
    assert Attempt.objects.using(broker.using).get(run=r, number=1).outcome == "released"


def test_release_and_heartbeat_of_many_leases_cost_a_few_statements_and_stay_fenced(broker):
    from django.db import connections
    from django.test.utils import CaptureQueriesContext

    runs = make_runs(broker.using, 60)
    push(broker, runs)
    broker.promote()
    leases = broker.lease(["default"], 60, "leaving-worker")
    assert len(leases) == 60
    # One lease went stale: its run was reaped and leased again by another worker.
    stale = leases[0]
    Run.objects.using(broker.using).filter(pk=stale.run_id).update(attempt=stale.attempt + 1)

    with CaptureQueriesContext(connections[broker.using]) as beat:
        held = broker.heartbeat(leases)
    with CaptureQueriesContext(connections[broker.using]) as gone:
        released = broker.release(leases)

    assert [le.run_id for le in held] == [le.run_id for le in leases[1:]]
    assert sorted(released) == sorted(le.run_id for le in leases[1:])
    assert len(beat.captured_queries) <= 8 and len(gone.captured_queries) <= 16  # not per run
    assert run(broker, stale.run_id).state == RunState.RUNNING  # not the stale lease's
    back = Run.objects.using(broker.using).filter(pk__in=released)
    assert {r.state for r in back} == {RunState.QUEUED}
    assert Attempt.objects.using(broker.using).filter(
        run_id__in=released, outcome=AttemptOutcome.RELEASED).count() == 59


def test_runs_of_a_paused_job_are_held_until_resume(broker):
    runs = make_runs(broker.using, 3)
    job_id = runs[0].job_id
    push(broker, runs)
    services.pause([job_id], using=broker.using)
    broker.promote()

    assert broker.lease(["default"], 5, "w1") == []

    services.resume([job_id], using=broker.using)
    broker.promote()
    assert sorted(le.run_id for le in broker.lease(["default"], 5, "w1")) == [r.pk for r in runs]


def test_the_broker_is_rebuilt_from_the_database_after_losing_its_data(broker):
    runs = make_runs(broker.using, 50) + make_runs(broker.using, 5, delay_s=0.5)
    push(broker, runs)
    broker.promote()
    [leased] = broker.lease(["default"], 1, "w1")

    flush_redis()
    broker.reconcile()
    time.sleep(0.6)
    broker.promote()

    leases = broker.lease(["default"], 100, "w2")
    assert sorted(le.run_id for le in leases) == sorted(r.pk for r in runs if r.pk != leased.run_id)


def test_queues_are_served_in_the_order_given(broker):
    other = make_runs(broker.using, 2, queue="reports")
    default = make_runs(broker.using, 2)
    push(broker, other + default)
    broker.promote()

    leases = broker.lease(["reports", "default"], 3, "w1")

    assert [le.run_id for le in leases] == [other[0].pk, other[1].pk, default[0].pk]
    assert broker.lease(["missing-queue"], 3, "w1") == []
    depth = {d.queue: d for d in broker.depth()}
    assert (depth["default"].ready, depth["default"].leased) == (1, 1)


def test_text_postgres_cannot_store_is_kept_readable_not_refused(broker):
    r, lease = lease_one(broker)

    assert broker.complete([Outcome(lease, AttemptOutcome.FAILED, error="bad \x00 byte",
                                    logs=[(db_now(broker.using), 20, "t", "nul \x00 here")])])

    attempt = Attempt.objects.using(broker.using).get(run=r)
    assert attempt.error == "bad \\x00 byte"
    assert [line.message for line in attempt.log_lines.all()] == ["nul \\x00 here"]
