"""Isolation contract (docs/isolation.md) on every broker/database pair: sharding and dispatcher
shard leases, weighted priority classes, per-owner and per-queue concurrency limits and
per-queue rate limits (runs/tenancy/policy.py, runs/brokers/redis/lua/lease.lua)."""

import json
import subprocess
import sys
import time
from collections import Counter

import pytest
from django.contrib.auth.models import User
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from redis.crc import key_slot

from jobs.models import OwnerPolicy
from runs.brokers.redis import RedisBroker
from runs.brokers.shards import shard_of
from runs.daemons.dispatcher import Dispatcher
from runs.execution.transitions import run_refs
from runs.models import Run, ShardLease
from runs.tenancy.limits import owner_limits
from runs.types import Outcome
from tests.conftest import ROOT, daemon_env, flush_redis, make_runs

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])

CLASSES = "0-2:70,3-6:25,7-9:5"


def queue_runs(broker, count, priority=5, **options):
    runs = make_runs(broker.using, count, priority=priority, **options)
    broker.push(run_refs(Run.objects.using(broker.using).filter(pk__in=[r.pk for r in runs])))
    broker.promote()
    return runs


def priorities(broker, leases) -> list[int]:
    by_id = dict(Run.objects.using(broker.using)
                 .filter(pk__in=[lease.run_id for lease in leases])
                 .values_list("pk", "priority"))
    return [by_id[lease.run_id] for lease in leases]


def succeed(broker, leases):
    return broker.complete([Outcome(lease, "succeeded") for lease in leases])


def user(broker, name):
    return User.objects.db_manager(broker.using).create_user(name)


def limit_owner(broker, owner, n):
    OwnerPolicy.objects.using(broker.using).create(owner=owner, max_running=n)
    broker.sync_limits(owner_limits(broker.using))


# --- sharding -------------------------------------------------------------------------

def test_a_shard_is_a_stable_hash_of_the_shard_key_and_spreads_handlers():
    assert shard_of("reports.build", 8) == shard_of("reports.build", 8)
    spread = Counter(shard_of(f"handler{i}", 8) for i in range(800))
    assert set(spread) == set(range(8))
    assert max(spread.values()) < 2 * min(spread.values())


def test_an_explicit_shard_key_overrides_the_handler(settings, db):
    from jobs import services

    settings.SCHEDULER = {"SHARDS": 64}
    plain = services.create_job("noop", name="a", delay_s=60)
    keyed = services.create_job("noop", name="b", delay_s=60,
                                shard_key="tenant-42")
    assert plain.runs.get().shard == shard_of("noop", 64)
    assert keyed.runs.get().shard == shard_of("tenant-42", 64)


@pytest.mark.parametrize("spread", ["", "default"], ids=["queue_slot", "spread"])
def test_every_redis_key_a_script_touches_is_named_by_keys_py_in_one_slot(
        settings, broker, spread):
    """Scripts build no key names (a Redis Cluster refuses keys a script was not given
    in KEYS, or keys of two slots): after a push, a lease that parks, and an unpark,
    every key in Redis but the Python-only queue set, alive marks, wake lists and (spread)
    the queue-wide class state is one keys.py names for that queue shard; on a cluster
    they share one slot, the queue's, or the shard's own when SPREAD_QUEUES names the
    queue; on a single Redis the shard's keys carry its {queue:shard} tag, spread or not
    (docs/isolation.md, "Redis Cluster" and "One queue over several masters")."""
    if broker.name != "redis":
        pytest.skip("Redis key layout")
    settings.SCHEDULER = {"SHARDS": 4, "OWNER_CONCURRENCY": 1, "SPREAD_QUEUES": spread}
    broker = RedisBroker(broker.using)  # the layout is read when a broker is made
    alice = user(broker, "alice")
    queue_runs(broker, 3, shard=2, owner=alice)
    broker.lease(["default"], 3, "w1")  # one leased, two parked for alice's limit
    broker.unpark()
    k = broker.keys
    shard = {k.delayed("default", 2), k.ready("default", 2), k.leased("default", 2),
             k.owners("default", 2), k.fair("default", 2), k.parkedby("default", 2),
             k.parked("default", 2), k.parkedrun("default", 2), k.running("default", 2),
             k.limits("default", 2), k.bucket("default", 2), k.buckets("default", 2)}
    keys = {key.decode() for key in broker.client.scan_iter(match=f"{k.prefix}:*")}
    python_only = ({k.queues, k.limits(""), k.wake("default"), k.queue_fair("default")}
                   | {k.alive(s) for s in range(4)})
    scripted = keys - python_only
    assert scripted <= shard
    assert {k.parked("default", 2), k.running("default", 2)} <= keys
    assert k.spread_out("default") == (k.cluster and spread == "default")
    if k.cluster:
        assert len({key_slot(key.encode()) for key in shard}) == 1
        tag = "{default:2}" if spread else "{default}"
        assert {key.split(":", 1)[1].rsplit("}", 1)[0] + "}" for key in shard} == {tag}
    else:
        assert {key.split("}")[0] for key in shard - {k.running("default"),
                k.limits("default"), k.bucket("default"), k.buckets("default")}} == {
            f"{k.prefix}:{{default:2"}
        assert k.running("default", 2) == f"{k.prefix}:{{limits}}:running"


def test_workers_lease_across_shards_without_favouring_shard_0(settings, broker):
    settings.SCHEDULER = {"SHARDS": 4}
    for shard in range(4):
        # Shard 0's runs are the newest, so neither broker has a reason to prefer them.
        queue_runs(broker, 10, shard=shard, delay_s=-1 - shard)
    shards = Counter()
    for _ in range(8):
        [lease] = broker.lease(["default"], 1, "w1")
        shards[lease.shard] += 1
    assert shards[0] <= 2
    assert sum(shards.values()) == 8


def test_dispatchers_split_the_shards_and_take_over_a_dead_ones_within_a_ttl(settings, broker):
    settings.SCHEDULER = {"SHARDS": 8, "SHARD_LEASE_TTL_S": 1.0}
    a = Dispatcher(broker.using, dispatcher_id="a", broker=broker)
    b = Dispatcher(broker.using, dispatcher_id="b", broker=broker)
    for _ in range(3):
        for dispatcher in (a, b):
            dispatcher.last_renew = float("-inf")
            dispatcher.round()
    assert len(a.shards) == len(b.shards) == 4
    assert set(a.shards).isdisjoint(b.shards)

    # b dies without releasing; a holds every shard once b's leases lapse (1 s TTL).
    time.sleep(1.1)
    a.last_renew = float("-inf")
    a.round()
    assert a.shards == list(range(8))
    assert set(ShardLease.objects.using(broker.using).values_list("owner", flat=True)) == {"a"}


def test_a_dispatcher_promotes_only_the_shards_it_holds(settings, broker):
    settings.SCHEDULER = {"SHARDS": 2, "SHARD_LEASE_TTL_S": 30.0}
    other = Dispatcher(broker.using, dispatcher_id="other", broker=broker)
    mine = Dispatcher(broker.using, dispatcher_id="mine", broker=broker)
    other.leases.refresh()  # takes both shards first
    mine.leases.refresh()   # sees two live dispatchers: its share is one, but none is free
    other.leases.refresh()  # gives one back
    mine.leases.refresh()
    assert len(mine.shards) == 1
    for shard in (0, 1):
        make_runs(broker.using, 3, shard=shard, delay_s=0.3)
    broker.push(run_refs(Run.objects.using(broker.using).all()))
    time.sleep(0.4)
    mine.last_renew = time.monotonic()
    mine.round()
    [held] = mine.shards
    depth = {shard: (ready, delayed) for _, shard, ready, delayed, _ in broker.shard_depth()}
    assert depth == {held: (3, 0), 1 - held: (0, 3)}


# --- priority classes -----------------------------------------------------------------

@hsettings(max_examples=6, deadline=None,
           suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.integers(1, 12), min_size=30, max_size=30),
       empty=st.sampled_from([None, 0, 1, 2]))
def test_backlogged_classes_get_their_weighted_share(settings, broker, batches, empty):
    flush_redis()
    Run.objects.using(broker.using).all().delete()
    settings.SCHEDULER = {"PRIORITY_CLASSES": CLASSES}
    weights = {0: 70, 1: 25, 2: 5}
    window = sum(batches)
    for cls, priority in ((0, 1), (1, 4), (2, 8)):
        if cls != empty:
            queue_runs(broker, window, priority=priority)
    seen = Counter()
    for n in batches:
        leases = broker.lease(["default"], n, "w1")
        assert len(leases) == n
        seen.update(0 if p <= 2 else 1 if p <= 6 else 2 for p in priorities(broker, leases))
        succeed(broker, leases)
    total = sum(w for c, w in weights.items() if c != empty)
    for cls, weight in weights.items():
        expected = 0 if cls == empty else 100 * weight / total
        assert abs(100 * seen[cls] / window - expected) <= 5, (seen, empty)


def test_a_low_priority_flood_delays_a_high_priority_run_by_at_most_one_lease(settings, broker):
    settings.SCHEDULER = {"PRIORITY_CLASSES": CLASSES}
    queue_runs(broker, 300, priority=9)
    for _ in range(40):  # low runs alone for a while: the idle high class banks nothing
        succeed(broker, broker.lease(["default"], 5, "w1"))
    [urgent] = queue_runs(broker, 1, priority=0)
    leases = broker.lease(["default"], 1, "w1")
    assert [lease.run_id for lease in leases] == [urgent.pk]


def test_order_inside_a_class_stays_strict(settings, broker):
    settings.SCHEDULER = {"PRIORITY_CLASSES": CLASSES}
    queue_runs(broker, 3, priority=2)
    queue_runs(broker, 3, priority=0)
    queue_runs(broker, 3, priority=1)
    assert priorities(broker, broker.lease(["default"], 9, "w1")) == [0, 0, 0, 1, 1, 1, 2, 2, 2]


# --- concurrency and rate limits ------------------------------------------------------

def test_an_owner_at_its_limit_does_not_block_other_owners(settings, broker):
    settings.SCHEDULER = {"OWNER_CONCURRENCY": 0}  # only the noisy owner has a limit
    noisy, quiet = user(broker, "noisy"), user(broker, "quiet")
    limit_owner(broker, noisy, 4)
    queue_runs(broker, 40, owner=noisy, delay_s=-10)  # older: first in line
    quiet_runs = queue_runs(broker, 5, owner=quiet)

    leases = broker.lease(["default"], 12, "w1") + broker.lease(["default"], 12, "w2")
    owners = Counter(Run.objects.using(broker.using).get(pk=lease.run_id).job.owner_id
                     for lease in leases)
    assert owners == {noisy.pk: 4, quiet.pk: 5}
    assert {le.run_id for le in leases} >= {r.pk for r in quiet_runs}

    # One of the noisy owner's runs finishes: exactly one more may start.
    noisy_lease = next(le for le in leases
                       if Run.objects.using(broker.using).get(pk=le.run_id).job.owner_id
                       == noisy.pk)
    succeed(broker, [noisy_lease])
    broker.unpark()
    assert len(broker.lease(["default"], 10, "w3")) == 1
    assert broker.lease(["default"], 10, "w3") == []
    running = Run.objects.using(broker.using).filter(state="running", job__owner=noisy)
    assert running.count() == 4


@pytest.mark.slow
def test_an_owner_limit_holds_across_racing_worker_processes(broker):
    owner = user(broker, "racer-owner")
    queue_runs(broker, 60, owner=owner)
    env = daemon_env(broker.name, broker.using, owner_concurrency=3)
    start_at = str(time.time() + 4)
    racers = [
        subprocess.Popen([sys.executable, "-m", "tests.race_client", "1", "2", start_at],
                         env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(6)
    ]
    outputs = [racer.communicate(timeout=120) for racer in racers]
    assert all(racer.returncode == 0 for racer in racers), [o[1][-2000:] for o in outputs]
    leased = [i for out, _ in outputs for i in json.loads(out.decode().splitlines()[-1])]
    # Nothing was acked, so the limit allows exactly three leases in all, whoever won them.
    assert len(leased) == 3
    assert Run.objects.using(broker.using).filter(state="running").count() == 3


def test_the_settings_default_owner_limit_applies_to_every_owner(settings, broker):
    settings.SCHEDULER = {"OWNER_CONCURRENCY": 2}
    a, b = user(broker, "a"), user(broker, "b")
    queue_runs(broker, 5, owner=a)
    queue_runs(broker, 5, owner=b)
    leases = broker.lease(["default"], 10, "w1")
    assert len(leases) == 4


def test_raising_an_owners_limit_releases_its_held_back_runs(settings, broker):
    owner = user(broker, "o")
    limit_owner(broker, owner, 1)
    queue_runs(broker, 5, owner=owner)
    assert len(broker.lease(["default"], 5, "w1")) == 1
    OwnerPolicy.objects.using(broker.using).filter(owner=owner).update(max_running=3)
    broker.sync_limits(owner_limits(broker.using))
    broker.unpark()
    assert len(broker.lease(["default"], 5, "w1")) == 2


def test_a_queue_concurrency_limit_caps_running_runs_of_the_queue(settings, broker):
    settings.SCHEDULER = {"QUEUE_CONCURRENCY": "default=3"}
    queue_runs(broker, 10)
    first = broker.lease(["default"], 10, "w1")
    assert len(first) == 3
    assert broker.lease(["default"], 10, "w2") == []
    succeed(broker, first[:2])
    assert len(broker.lease(["default"], 10, "w2")) == 2


def test_a_queue_rate_limit_is_a_token_bucket(settings, broker):
    settings.SCHEDULER = {"QUEUE_RATE": "default=5:5"}
    queue_runs(broker, 40)
    assert len(broker.lease(["default"], 40, "w1")) == 5  # the full bucket
    assert broker.lease(["default"], 40, "w1") == []
    time.sleep(1.0)
    refilled = len(broker.lease(["default"], 40, "w1"))
    assert 4 <= refilled <= 6


def test_weighted_worker_queues_share_lease_capacity(broker):
    queue_runs(broker, 60, queue="bulk")
    queue_runs(broker, 60, queue="web")
    seen = Counter()
    for _ in range(40):
        leases = broker.lease(["bulk", "web"], 1, "w1", weights={"bulk": 1, "web": 3})
        seen.update(lease.queue for lease in leases)
    assert seen == {"web": 30, "bulk": 10}
    # An empty queue's share goes to the other.
    seen.clear()
    for _ in range(10):
        seen.update(lease.queue for lease in
                    broker.lease(["bulk", "empty", "web"], 2, "w1",
                                 weights={"bulk": 1, "empty": 5, "web": 1}))
    assert sum(seen.values()) == 20
