"""The lease and the batched ack find runs partition by partition (docs/performance.md,
"Partitions and the ack"). The ack matches each run on its ``scheduled_at`` too, the
history tables' partition key, when the leases carry it, and still acks, fenced, when
they do not; the lease reads yesterday's and today's partitions first. What that saves is
timed by bench/ack_statement.py --history-days; here, that the right rows are matched."""

import dataclasses
from datetime import UTC, datetime

import pytest
from django.db import OperationalError, connection

from runs.brokers import get_broker
from runs.execution.completion import complete, scheduled_us
from runs.execution.leases import start_attempts
from runs.execution.transitions import run_refs
from runs.history import time_partitions
from runs.models import Attempt, AttemptOutcome, Run, RunState
from runs.types import Lease, Outcome
from tests.conftest import flush_redis, make_runs

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def postgres():
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's one-statement ack")
    time_partitions.create_ahead()


def leased(count: int) -> list[Lease]:
    runs = make_runs("default", count)
    Run.objects.filter(pk__in=[r.pk for r in runs]).update(state=RunState.QUEUED)
    leases = start_attempts([r.pk for r in runs], "w1", 60, "default")
    assert len(leases) == count
    return leases


def states(leases: list[Lease]) -> tuple[set, set]:
    ids = [le.run_id for le in leases]
    return (set(Run.objects.filter(pk__in=ids).values_list("state", flat=True)),
            set(Attempt.objects.filter(run_id__in=ids).values_list("outcome", flat=True)))


def success(lease: Lease, **fields) -> Outcome:
    return Outcome(lease=lease, outcome=AttemptOutcome.SUCCEEDED, **fields)


def test_an_ack_matches_its_runs_on_their_scheduled_at(postgres):
    leases = leased(4)
    stored = dict(Run.objects.filter(pk__in=[le.run_id for le in leases])
                  .values_list("pk", "scheduled_at"))
    assert all(scheduled_us(success(le)) == round(stored[le.run_id].timestamp() * 1e6)
               for le in leases)
    # A task that names another instant matches no run: the key is part of the match.
    wrong = [dataclasses.replace(le, task={**le.task, "scheduled_at_us":
                                           le.task["scheduled_at_us"] + 1})
             for le in leases[:2]]
    assert complete([success(le) for le in wrong], "default")[0] == [False, False]
    assert states(leases) == ({RunState.RUNNING}, {AttemptOutcome.RUNNING})
    accepted = complete([success(le, result={"n": le.run_id}) for le in leases], "default")[0]
    assert accepted == [True] * 4
    assert states(leases) == ({RunState.SUCCEEDED}, {AttemptOutcome.SUCCEEDED})
    assert sorted(Run.objects.filter(pk__in=[le.run_id for le in leases])
                  .values_list("result", flat=True), key=lambda r: r["n"]) == [
        {"n": le.run_id} for le in sorted(leases, key=lambda le: le.run_id)]


def test_an_ack_without_the_runs_times_still_acks_fenced(postgres):
    leases = leased(3)
    bare = [Lease(le.run_id, le.attempt, le.queue, le.shard, le.expires_at) for le in leases]
    assert scheduled_us(success(bare[0])) is None
    stale = dataclasses.replace(bare[0], attempt=bare[0].attempt - 1)
    accepted = complete([success(le) for le in [stale, *bare]], "default")[0]
    assert accepted == [False, True, True, True]
    assert states(leases) == ({RunState.SUCCEEDED}, {AttemptOutcome.SUCCEEDED})


def test_a_task_from_the_pipe_gives_the_key_too(postgres):
    leases = leased(2)
    piped = [success(Lease(le.run_id, le.attempt, le.queue, le.shard, le.expires_at),
                     task={"scheduled_at": le.task["scheduled_at_us"]}) for le in leases]
    assert [scheduled_us(o) for o in piped] == [le.task["scheduled_at_us"] for le in leases]
    assert complete(piped, "default")[0] == [True, True]
    assert states(leases) == ({RunState.SUCCEEDED}, {AttemptOutcome.SUCCEEDED})


def test_a_lease_starts_runs_of_any_partition_once(postgres):
    """The lease reads yesterday's and today's partitions first, then the rest for the
    ids left (runs/execution/leases.py, start_statement): runs scheduled days before and
    days after are leased too, each once, with its attempt."""
    now, recent = make_runs("default", 2), make_runs("default", 3)
    old = make_runs("default", 2, delay_s=-3 * 86_400)  # a retry waiting since then
    ahead = make_runs("default", 2, delay_s=2 * 86_400)  # started before its time
    runs = [*now, *recent, *old, *ahead]
    Run.objects.filter(pk__in=[r.pk for r in ahead]).update(run_at=now[0].run_at)
    Run.objects.filter(pk__in=[r.pk for r in runs]).update(state=RunState.QUEUED)
    ids = [r.pk for r in runs]
    leases = start_attempts([*ids, ids[0], 10**12], "w1", 60, "default")
    assert sorted(le.run_id for le in leases) == sorted(ids)
    assert [scheduled_us(success(le)) for le in sorted(leases, key=lambda le: le.run_id)] \
        == [round(r.scheduled_at.timestamp() * 1e6) for r in sorted(runs, key=lambda r: r.pk)]
    assert list(Attempt.objects.filter(run_id__in=ids).values_list("number", flat=True)) \
        == [1] * len(ids)
    assert start_attempts(ids, "w2", 60, "default") == []
    assert complete([success(le) for le in leases], "default")[0] == [True] * len(ids)
    assert states(leases) == ({RunState.SUCCEEDED}, {AttemptOutcome.SUCCEEDED})


def test_an_ack_matches_a_run_scheduled_centuries_ahead(postgres):
    """Past 2^53 µs (the year 2255) a float multiple of a microsecond is not exact."""
    run = make_runs("default", 1)[0]
    far = datetime(3000, 1, 1, 0, 0, 0, 1, tzinfo=UTC)
    Run.objects.filter(pk=run.pk).update(scheduled_at=far, state=RunState.QUEUED)
    leases = start_attempts([run.pk], "w1", 60, "default")
    assert scheduled_us(success(leases[0])) == round(far.timestamp()) * 10**6 + 1
    assert complete([success(leases[0])], "default")[0] == [True]
    assert states(leases) == ({RunState.SUCCEEDED}, {AttemptOutcome.SUCCEEDED})


@pytest.fixture
def redis_broker():
    flush_redis()
    yield get_broker("default", name="redis")
    flush_redis()


def test_a_lease_whose_second_statement_fails_keeps_what_the_first_started(
        postgres, redis_broker):
    """Outside a transaction the first statement's leases are committed: the worker gets
    them, and the runs the second did not start are given back by the next reap."""
    recent, old = make_runs("default", 3), make_runs("default", 2, delay_s=-3 * 86_400)
    redis_broker.push(run_refs(Run.objects.filter(pk__in=[r.pk for r in [*recent, *old]])))

    def fail_the_wide_one(execute, sql, params, many, context):
        if "started AS (" in sql and "scheduled_at >= %s" not in sql:
            raise OperationalError("the second statement failed")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(fail_the_wide_one):
        leases = redis_broker.lease(["default"], 10, "w1")
    assert sorted(le.run_id for le in leases) == sorted(r.pk for r in recent)
    assert set(Run.objects.filter(pk__in=[r.pk for r in old]).values_list(
        "state", flat=True)) == {RunState.SCHEDULED}
    redis_broker.reap()
    again = redis_broker.lease(["default"], 10, "w2")
    assert sorted(le.run_id for le in again) == sorted(r.pk for r in old)
    assert complete([success(le) for le in [*leases, *again]], "default")[0] == [True] * 5


def test_a_lease_whose_expiry_of_refused_runs_fails_keeps_its_leases(postgres):
    """Outside a transaction the runs started are committed: ending the refused ones
    expired is best effort, left to a later lease."""
    runs = make_runs("default", 2)
    Run.objects.filter(pk__in=[r.pk for r in runs]).update(state=RunState.QUEUED)

    def fail_the_expiry(execute, sql, params, many, context):
        if "error = (SELECT" in sql:
            raise OperationalError("the expiry failed")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(fail_the_expiry):
        leases = start_attempts([r.pk for r in runs] + [10**12], "w1", 60, "default")
    assert sorted(le.run_id for le in leases) == sorted(r.pk for r in runs)
    assert states(leases) == ({RunState.RUNNING}, {AttemptOutcome.RUNNING})
