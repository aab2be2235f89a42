"""A queue spread over a Redis Cluster's masters (docs/isolation.md, "One queue over several
masters"): with SPREAD_QUEUES naming it, each shard of the queue sits in a slot of its own,
so its shards land on several masters; runs are leased and acked exactly once; and the
queue's limits, split per shard, hold within the bounds the doc states. Against the real
cluster the suite starts (tests/conftest.py, redis_cluster_url)."""

import json
import subprocess
import sys
import time

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured

from runs.brokers import get_broker
from runs.brokers.redis.keys import Keys
from runs.execution.transitions import run_refs
from runs.models import Run
from runs.tenancy import policy
from runs.types import Outcome
from tests.conftest import ROOT, daemon_env, flush_redis, make_runs, redis_at

pytestmark = pytest.mark.django_db(transaction=True)

SHARDS = 4


@pytest.fixture
def spread(settings, redis_cluster_url):
    """A function of tunables (SCHEDULER names) that points settings.REDIS_URL at the
    test cluster, spreads the queue ``default`` over SHARDS shards with those tunables
    and returns a Redis broker made after them (the key layout is read when a broker is
    made)."""
    with redis_at(settings, redis_cluster_url):
        flush_redis()

        def make(**tunables):
            settings.SCHEDULER = {"SHARDS": SHARDS, "SPREAD_QUEUES": "default", **tunables}
            from runs import brokers

            brokers._instances.clear()
            return get_broker("default", name="redis")

        yield make
        flush_redis()


def queue_runs(broker, count, shard, owner=None, queue="default"):
    runs = make_runs("default", count, shard=shard, owner=owner, queue=queue)
    broker.push(run_refs(Run.objects.filter(pk__in=[r.pk for r in runs])))
    return runs


def lease_all(broker, batch=3, calls=200):
    """Lease ``batch`` at a time from two workers until a call finds nothing."""
    leases = []
    for i in range(calls):
        got = broker.lease(["default"], batch, f"w{i % 2}")
        if not got:
            break
        leases += got
    return leases


def running_of_queue(broker) -> int:
    return broker.running_counts().get("q:default", 0)


def test_a_spread_queues_shards_sit_in_their_own_slots_on_several_masters(spread):
    broker = spread()
    client = broker.client
    for shard in range(SHARDS):
        queue_runs(broker, 2, shard)
    queue_runs(broker, 2, 0, queue="other")  # not spread: one slot for the queue

    slots = {shard: client.cluster_keyslot(broker.keys.ready("default", shard))
             for shard in range(SHARDS)}
    masters = set()
    for shard, slot in slots.items():
        node = client.nodes_manager.get_node_from_slot(slot)
        key = broker.keys.ready("default", shard)
        assert node.redis_connection.zcard(key) == 2  # the runs are on that master
        masters.add(node.name)
    assert len(set(slots.values())) == SHARDS
    assert len(masters) > 1
    assert client.cluster_keyslot(broker.keys.ready("other", 0)) == client.cluster_keyslot(
        broker.keys.running("other"))


def script_calls_per_master(client) -> dict[str, int]:
    """EVALSHA and EVAL calls each master has served (INFO commandstats)."""
    calls = {}
    for node in client.get_primaries():
        stats = node.redis_connection.info("commandstats")
        calls[node.name] = sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0)
                               for c in ("evalsha", "eval"))
    return calls


def test_leases_and_acks_of_a_spread_queue_run_on_several_masters(spread):
    """The point of spreading: a queue's script work lands on more than one master, where
    the same queue unspread keeps it on one."""
    broker = spread(OWNER_CONCURRENCY=0)
    client = broker.client
    worked = {}
    for queue in ("default", "other"):  # "other" is not in SPREAD_QUEUES
        for shard in range(SHARDS):
            runs = make_runs("default", 5, shard=shard, queue=queue)
            broker.push(run_refs(Run.objects.filter(pk__in=[r.pk for r in runs])))
        before = script_calls_per_master(client)
        leases = []
        while got := broker.lease([queue], 4, "w1"):
            leases += got
        broker.complete([Outcome(lease, "succeeded") for lease in leases])
        after = script_calls_per_master(client)
        assert len(leases) == 5 * SHARDS
        worked[queue] = {name for name in after if after[name] > before.get(name, 0)}

    assert len(worked["default"]) > 1
    assert len(worked["other"]) == 1


def test_runs_of_a_spread_queue_are_leased_and_acked_exactly_once(spread):
    broker = spread(OWNER_CONCURRENCY=0)
    runs = [r for shard in range(SHARDS) for r in queue_runs(broker, 10, shard)]

    leases = lease_all(broker)

    ids = [lease.run_id for lease in leases]
    assert sorted(ids) == sorted(r.pk for r in runs)
    assert {lease.shard for lease in leases} == set(range(SHARDS))
    assert running_of_queue(broker) == len(runs)
    broker.complete([Outcome(lease, "succeeded") for lease in leases])
    assert set(Run.objects.values_list("state", flat=True)) == {"succeeded"}
    assert running_of_queue(broker) == 0
    assert [(d.ready, d.delayed, d.leased) for d in broker.depth()] == [(0, 0, 0)]
    assert lease_all(broker) == []


@pytest.mark.slow
def test_racing_worker_processes_lease_each_run_of_a_spread_queue_once(spread):
    broker = spread(OWNER_CONCURRENCY=0)
    runs = [r for shard in range(SHARDS) for r in queue_runs(broker, 20, shard)]
    env = daemon_env("redis", "default", shards=SHARDS, spread_queues="default",
                     owner_concurrency=0)
    start_at = str(time.time() + 4)
    racers = [subprocess.Popen([sys.executable, "-m", "tests.race_client", "1", "3", start_at],
                               env=env, cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE) for _ in range(4)]
    outputs = [racer.communicate(timeout=120) for racer in racers]
    assert all(racer.returncode == 0 for racer in racers), [o[1][-2000:] for o in outputs]

    leased = [i for out, _ in outputs for i in json.loads(out.decode().splitlines()[-1])]
    assert sorted(leased) == sorted(r.pk for r in runs)
    # Redis counted each lease once: a run leased twice would count twice.
    assert running_of_queue(broker) == len(runs)
    assert sum(d.leased for d in broker.depth()) == len(runs)


def test_a_spread_queues_concurrency_limit_is_split_over_its_shards(spread):
    broker = spread(QUEUE_CONCURRENCY="default=6")  # shares 2, 2, 1, 1
    for shard in range(SHARDS):
        queue_runs(broker, 5, shard)

    first = lease_all(broker)

    assert len(first) == 6
    assert running_of_queue(broker) == 6
    broker.complete([Outcome(lease, "succeeded") for lease in first[:2]])
    again = lease_all(broker)
    assert len(again) == 2
    assert running_of_queue(broker) == 6


def test_a_skewed_spread_queue_gets_only_its_shards_share(spread):
    broker = spread(QUEUE_CONCURRENCY="default=8")
    queue_runs(broker, 10, 1)

    assert len(lease_all(broker)) == 2  # the documented cost: 8 / 4 shards


def test_a_limit_below_the_shard_count_allows_one_run_per_shard(spread):
    broker = spread(QUEUE_CONCURRENCY="default=2")
    for shard in range(SHARDS):
        queue_runs(broker, 3, shard)

    assert len(lease_all(broker)) == SHARDS  # the documented bound: max(limit, SHARDS)


def test_a_spread_queues_rate_is_split_over_its_shards(spread):
    broker = spread(QUEUE_RATE="default=8:8")  # 2/s and a burst of 2 per shard
    for shard in range(SHARDS):
        queue_runs(broker, 5, shard)

    assert len(lease_all(broker, batch=20)) == 8


def test_an_owners_limit_holds_per_shard_of_a_spread_queue(spread):
    alice = User.objects.create_user("alice")
    broker = spread()
    broker.sync_limits({alice.pk: 1})
    queue_runs(broker, 3, 0, owner=alice)
    queue_runs(broker, 3, 1, owner=alice)

    leases = lease_all(broker)

    assert sorted(lease.shard for lease in leases) == [0, 1]
    assert broker.running_counts()[f"o:{alice.pk}"] == 2


def test_spread_queues_reads_names_or_every_queue_and_refuses_anything_else():
    assert policy.parse_spread("") == frozenset()
    assert policy.parse_spread("*") is None
    assert policy.parse_spread(" emails , reports ") == {"emails", "reports"}
    for bad in ("emails,re ports", "*,emails", "{emails}"):
        with pytest.raises(ImproperlyConfigured, match="SPREAD_QUEUES"):
            policy.parse_spread(bad)


def test_split_shares_sum_to_the_queue_limit_and_give_each_shard_one():
    for n in range(1, 30):
        shares = [policy.QueueLimits(n).shard_share(s, SHARDS).max_running
                  for s in range(SHARDS)]
        assert sum(shares) == max(n, SHARDS)
        assert min(shares) >= 1
    rate = policy.QueueLimits(0, 10.0, 2.0).shard_share(5, SHARDS)
    assert (rate.max_running, rate.rate, rate.burst) == (0, 2.5, 1.0)


def test_every_queue_spreads_with_a_star_and_none_on_a_single_redis():
    everything = Keys("p", cluster=True, spread=None)
    assert everything.ready("q", 1) == "p:{q:1}:ready"
    assert everything.running("q", 1) == "p:{q:1}:running"
    assert everything.queue_fair("q") == "p:{q}:fair:q"  # plain commands only
    single = Keys("p", cluster=False, spread=None)
    assert single.ready("q", 1) == "p:{q:1}:ready"
    assert single.running("q", 1) == single.running("r", 0) == "p:{limits}:running"
    named = Keys("p", cluster=True, spread=frozenset({"q"}))
    assert named.running("r", 1) == named.running("r", 0) == "p:{r}:running"
