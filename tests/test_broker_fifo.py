"""FIFO within a priority (docs/architecture.md, "Brokers"): runs of one priority and one
run_at leave the broker in the order they were created (their ids, which the database
hands out in creation order), whatever their ids and however many share a millisecond. On
every broker/database pair. The Redis ready set once gave them in the lexicographic order
of their ids: 100..109 before 95..99."""

from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from jobs.models import Job
from runs.brokers.redis.keys import member
from runs.execution.transitions import run_refs
from runs.models import Attempt, Run
from tests.conftest import flush_redis, wait_until

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


def runs_with_ids(using: str, ids: list[int], priority: int = 5) -> None:
    """One job with a run per id in ``ids`` (created in that order), all due at the same
    microsecond, pushed to the broker by the caller."""
    when = timezone.now().replace(microsecond=500_000) - timedelta(seconds=2)
    job = Job.objects.using(using).create(name="fifo", handler="noop", payload={},
                                          run_at=when, priority=priority)
    Run.objects.using(using).bulk_create([
        Run(pk=run_id, job=job, scheduled_at=when + timedelta(microseconds=i), run_at=when,
            queue="default", priority=priority, max_attempts=1, shard=0)
        for i, run_id in enumerate(ids)])


def reset(using: str) -> None:
    Attempt.objects.using(using).all().delete()
    Run.objects.using(using).all().delete()
    Job.objects.using(using).all().delete()
    flush_redis()
    if connections[using].vendor == "postgresql":
        # Explicit ids leave the identity behind; later creates must not collide.
        with connections[using].cursor() as cursor:
            cursor.execute("SELECT setval(pg_get_serial_sequence('runs_run', 'id'), "
                           "1000000000)")


def leased_in_order(broker, n: int, per_call: int) -> list[int]:
    out: list[int] = []
    while len(out) < n:
        got = broker.lease(["default"], per_call, "w")
        assert got, f"leased {len(out)} of {n}"
        out += [lease.run_id for lease in got]
    return out


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(ids=list(range(95, 110)), per_call=1)
@example(ids=list(range(95, 110)), per_call=15)
@example(ids=list(range(990, 1010)), per_call=7)
@given(ids=st.lists(st.integers(1, 10**12), min_size=2, max_size=40, unique=True)
       .map(sorted),
       per_call=st.integers(1, 50))
def test_runs_of_one_priority_and_run_at_are_leased_in_creation_order(broker, ids, per_call):
    reset(broker.using)
    runs_with_ids(broker.using, ids)
    broker.push(run_refs(Run.objects.using(broker.using).all()))
    broker.promote()

    assert leased_in_order(broker, len(ids), per_call) == ids


def test_fifo_holds_for_runs_promoted_from_the_delayed_set(broker):
    """Runs pushed before they are due wait in the delayed set and are promoted when due;
    the same rule orders them then."""
    reset(broker.using)
    when = timezone.now() + timedelta(seconds=0.5)
    job = Job.objects.using(broker.using).create(name="fifo", handler="noop", payload={},
                                                 run_at=when)
    ids = [8, 9, 10, 11, 99, 100, 101, 1000]
    Run.objects.using(broker.using).bulk_create([
        Run(pk=run_id, job=job, scheduled_at=when + timedelta(microseconds=i), run_at=when,
            queue="default", priority=5, max_attempts=1, shard=0)
        for i, run_id in enumerate(ids)])
    broker.push(run_refs(Run.objects.using(broker.using).all()))

    def all_ready() -> bool:
        broker.promote()
        return sum(d.ready for d in broker.depth()) == len(ids)

    wait_until(all_ready, timeout=10, message="the runs fall due")
    assert leased_in_order(broker, len(ids), 3) == ids


def test_a_plain_member_left_by_an_older_version_is_replaced_by_a_push(rb):
    """Before the padding, members were plain ids; reconcile pushes such a run again and
    the push must not leave it in the ready set twice (it would be claimed twice)."""
    reset("default")
    runs_with_ids("default", [95])
    ready = rb.keys.ready("default", 0)
    rb.client.zadd(ready, {"95": 5 * 4398046511104})

    rb.push(run_refs(Run.objects.all()))

    assert [m.decode() for m in rb.client.zrange(ready, 0, -1)] == [member(95)]
    assert [lease.run_id for lease in rb.lease(["default"], 5, "w")] == [95]


def test_fifo_holds_within_each_priority_when_weighted_classes_share_a_lease(broker, settings):
    """With weighted classes one lease takes runs of several classes in turn; within each
    priority the creation order still holds."""
    settings.SCHEDULER = {"PRIORITY_CLASSES": "0-4:1,5-9:1"}
    reset(broker.using)
    urgent, normal = list(range(95, 105)), list(range(990, 1010))
    runs_with_ids(broker.using, urgent, priority=1)
    runs_with_ids(broker.using, normal, priority=7)
    broker.push(run_refs(Run.objects.using(broker.using).all()))
    broker.promote()

    leased = leased_in_order(broker, len(urgent) + len(normal), 6)

    assert [i for i in leased if i in urgent] == urgent
    assert [i for i in leased if i in normal] == normal
