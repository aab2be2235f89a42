"""push.lua, which places runs in a Redis queue shard (runs/brokers/redis/lua/push.lua): one
variadic command per step over a whole call's runs, with the per-run rules it had as a
loop of seven commands per run (BENCHMARKS.md, "Ingest (W1)"). A
run pushed again leaves its lease (uncounted), its parked place and the other waiting set;
a run given twice in one call ends as its last entry says; a call bigger than Lua's
unpack takes at once is sliced."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from runs.brokers.redis import broker as redis_broker
from runs.brokers.redis.keys import member
from runs.execution.transitions import run_refs
from runs.models import Run
from runs.types import RunRef
from tests.conftest import make_runs

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


@pytest.fixture
def redis(broker):
    if broker.name != "redis":
        pytest.skip("push.lua is the Redis broker's")
    return broker


def waiting(broker, queue="default", shard=0) -> tuple[set[bytes], set[bytes]]:
    """The members of the shard's (delayed, ready) sets."""
    k, client = broker.keys, broker.client
    return (set(client.zrange(k.delayed(queue, shard), 0, -1)),
            set(client.zrange(k.ready(queue, shard), 0, -1)))


def test_a_run_given_twice_in_one_push_ends_as_its_last_entry_says(redis):
    now = timezone.now()
    due, later = now - timedelta(seconds=1), now + timedelta(hours=1)
    redis.push([RunRef(7, "default", 0, 5, due, None), RunRef(7, "default", 0, 5, later, 3),
                RunRef(8, "default", 0, 5, later, None), RunRef(8, "default", 0, 5, due, None)])
    delayed, ready = waiting(redis)
    assert delayed == {member(7).encode()}
    assert ready == {member(8).encode()}
    owners = redis.client.hgetall(redis.keys.owners("default", 0))
    assert owners == {b"7": b"3"}


def test_a_leased_run_pushed_again_loses_its_lease_and_is_uncounted(redis):
    alice = User.objects.db_manager(redis.using).create_user("alice")
    runs = make_runs(redis.using, 2, owner=alice)
    redis.push(run_refs(Run.objects.using(redis.using).all()))
    redis.promote()
    leases = redis.lease(["default"], 2, "w1")
    assert len(leases) == 2
    k = redis.keys
    running = redis.client.hgetall(k.running("default"))
    assert running[f"o:{alice.pk}".encode()] == b"2"
    redis.push(run_refs(Run.objects.using(redis.using).filter(pk=runs[0].pk)))
    assert redis.client.zrange(k.leased("default", 0), 0, -1) == [str(runs[1].pk).encode()]
    running = redis.client.hgetall(k.running("default"))
    assert running[f"o:{alice.pk}".encode()] == b"1"
    assert running[b"q:default"] == b"1"
    assert waiting(redis)[1] == {member(runs[0].pk).encode()}
    redis.push(run_refs(Run.objects.using(redis.using).filter(pk=runs[1].pk)))
    assert redis.client.hgetall(k.running("default")) == {}  # counts at 0 are removed


def test_a_parked_run_pushed_again_leaves_the_parked_set(settings, redis):
    settings.SCHEDULER = {"OWNER_CONCURRENCY": 1}
    alice = User.objects.db_manager(redis.using).create_user("alice")
    make_runs(redis.using, 3, owner=alice)
    redis.push(run_refs(Run.objects.using(redis.using).all()))
    redis.promote()
    leased = {lease.run_id for lease in redis.lease(["default"], 3, "w1")}
    assert len(leased) == 1  # the other two parked by alice's limit
    k = redis.keys
    parked = {int(i) for i in redis.client.hkeys(k.parkedrun("default", 0))}
    assert len(parked) == 2
    redis.push(run_refs(Run.objects.using(redis.using).filter(pk__in=parked)))
    assert redis.client.zcard(k.parked("default", 0)) == 0
    assert redis.client.hlen(k.parkedrun("default", 0)) == 0
    assert waiting(redis)[1] == {member(i).encode() for i in parked}


def test_a_push_bigger_than_one_lua_unpack_is_sliced(monkeypatch, redis):
    monkeypatch.setattr(redis_broker, "PUSH_CHUNK", 5000)  # one script call of 5,000 runs
    due = timezone.now() - timedelta(seconds=1)
    later = due + timedelta(hours=1)
    redis.push([RunRef(i, "default", 0, i % 10, due if i % 2 else later, i % 3 or None)
                for i in range(1, 5001)])
    delayed, ready = waiting(redis)
    assert ready == {member(i).encode() for i in range(1, 5001, 2)}
    assert delayed == {member(i).encode() for i in range(2, 5001, 2)}
    owners = redis.client.hgetall(redis.keys.owners("default", 0))
    assert owners == {str(i).encode(): str(i % 3).encode() for i in range(1, 5001) if i % 3}
