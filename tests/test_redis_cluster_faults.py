"""A Redis Cluster losing nodes (docs/scaling.md, "A Redis Cluster"): script calls are
routed by their keys' slot without asking one fixed node, so losing that node for good
stalls no queue beyond the cluster's failover; with no node answering the daemons wait
instead of exiting and job creation never fails after its commit; the URL names several
seed nodes, any one of which is enough.

The tests that kill nodes start a cluster of their own (chaos/redis_cluster.py); the others
use the suite's (conftest ``redis_cluster_url``).
"""

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from redis.crc import key_slot

from chaos.cluster import free_port
from chaos.redis_cluster import RedisCluster, _cli
from jobs import services
from runs.brokers import get_broker
from runs.brokers.redis.wire import cluster_seeds, redis_client
from runs.daemons.dispatcher import Dispatcher
from runs.execution.transitions import run_refs
from runs.models import Run, ShardLease
from scheduler_core.exceptions import BrokerUnavailable
from tests.conftest import (
    ROOT,
    daemon_env,
    flush_redis,
    make_runs,
    redis_at,
    start_daemon,
    stop,
    wait_until,
)

pytestmark = pytest.mark.django_db(transaction=True)
TUNABLES = {"shards": 2, "reconcile_interval_s": 1, "shard_lease_ttl_s": 3, "lease_ttl_s": 5}


@pytest.fixture
def own_cluster():
    """A 3-master, 3-replica cluster of this test's own, to kill nodes of."""
    cluster = RedisCluster().start()
    try:
        cluster.wait_synced()
        yield cluster
    finally:
        cluster.stop()


def port_of(url: str) -> int:
    return int(re.search(r":(\d+)/", url).group(1))


def queues_by_master(cluster: RedisCluster, per_master: int) -> dict[int, list[str]]:
    """``per_master`` queue names whose keys live on each master (port -> names)."""
    nodes = redis_client(cluster.url).nodes_manager
    found: dict[int, list[str]] = {port: [] for port in cluster.masters()}
    index = 0
    while any(len(names) < per_master for names in found.values()):
        name = f"q{index}"
        index += 1
        names = found[nodes.get_node_from_slot(key_slot(f"{{{name}}}".encode())).port]
        if len(names) < per_master:
            names.append(name)
    return found


def unpushed_runs(queues: list[str], shards: int) -> list[int]:
    """Two runs due now per queue and shard, in the database only: the broker gets them
    from the reconcile of the dispatcher holding their shard."""
    return [run.pk for queue in queues for shard in range(shards)
            for run in make_runs("default", 2, queue=queue, shard=shard)]


def all_succeeded(run_ids: list[int]) -> bool:
    return Run.objects.filter(pk__in=run_ids, state="succeeded").count() == len(run_ids)


def logged_a_failure(path: Path) -> bool:
    return "retrying with backoff" in path.read_text(errors="replace")


@pytest.mark.slow
def test_losing_the_slot_0_master_for_good_stalls_no_queue_of_any_process(
        own_cluster, settings, tmp_path):
    """Every script call used to ask the master of slot 0 (the node of the URL) for its
    keys first, so with it gone every queue of every process stalled."""
    victim = port_of(own_cluster.url)
    nodes = redis_client(own_cluster.url).nodes_manager
    assert nodes.get_node_from_slot(0).port == victim
    by_master = queues_by_master(own_cluster, per_master=2)
    # Each worker serves a queue on every master, and no queue of the other's.
    served = [[names[i] for names in by_master.values()] for i in range(2)]
    with redis_at(settings, own_cluster.url):
        env = daemon_env("redis", **TUNABLES)
        procs = [start_daemon(["rundispatcher"], env, tmp_path / f"d{i}.log") for i in range(2)]
        procs += [start_daemon(["runworker", "--queues", ",".join(queues), "--concurrency",
                                "2"], env, tmp_path / f"w{i}.log")
                  for i, queues in enumerate(served)]
        try:
            everything = served[0] + served[1]
            warm = unpushed_runs(everything, shards=2)
            wait_until(lambda: all_succeeded(warm), timeout=60, message="the warm-up runs")
            wait_until(lambda: len(set(ShardLease.objects.exclude(owner="")
                                       .values_list("owner", flat=True))) == 2,
                       message="each dispatcher to hold a shard")

            own_cluster.nodes[victim].send_signal(signal.SIGKILL)
            own_cluster.nodes[victim].wait()
            after = unpushed_runs(everything, shards=2)
            after += [services.create_job("noop", queue=queue).runs.get().pk
                      for queue in everything]

            # Each run needs the dispatcher of its shard (reconcile) and the worker of its
            # queue: all done means every queue of every process resumed.
            wait_until(lambda: all_succeeded(after), timeout=10,
                       message="every queue of every process to resume")
            assert [proc.poll() for proc in procs] == [None] * 4
        finally:
            stop(*procs)


@pytest.mark.slow
def test_no_daemon_exits_and_no_committed_job_fails_while_every_node_is_down(
        own_cluster, settings, tmp_path):
    """redis-py's RedisClusterException (no node answers) is not a RedisError: it ended
    the daemons and failed job creations after their commit."""
    with redis_at(settings, own_cluster.url):
        env = daemon_env("redis", **TUNABLES)
        logs = [tmp_path / f"{name}.log" for name in ("d0", "d1", "w0", "w1", "scheduler")]
        procs = [start_daemon(["rundispatcher"], env, logs[0]),
                 start_daemon(["rundispatcher"], env, logs[1]),
                 start_daemon(["runworker", "--concurrency", "2"], env, logs[2]),
                 start_daemon(["runworker", "--concurrency", "2"], env, logs[3]),
                 start_daemon(["runscheduler"], env, logs[4])]
        try:
            warm = services.create_job("noop")
            wait_until(lambda: all_succeeded([warm.runs.get().pk]), timeout=60,
                       message="the warm-up run")
            wait_until(lambda: all(": started" in log.read_text(errors="replace")
                                   for log in logs), timeout=60, message="every daemon")

            ports = list(own_cluster.nodes)
            for node in own_cluster.nodes.values():
                node.kill()
                node.wait()
            wait_until(lambda: all(proc.poll() is not None or logged_a_failure(log)
                                   for proc, log in zip(procs, logs[:4], strict=False)),
                       message="the dispatchers and workers to meet the outage")
            one = services.create_job("noop")
            bulk = services.create_jobs([{"handler": "noop"} for _ in range(5)])
            created = [one.runs.get().pk] + [job.runs.get().pk for job in bulk]
            assert [proc.poll() for proc in procs] == [None] * 5

            for port in ports:
                own_cluster.start_node(port)
            own_cluster.wait_ok()
            wait_until(lambda: all_succeeded(created), timeout=60,
                       message="the jobs made during the outage to run")
            assert [proc.poll() for proc in procs] == [None] * 5
        finally:
            stop(*procs)


def test_a_cluster_url_serves_with_its_first_seed_node_down(redis_cluster_url, settings,
                                                           tmp_path):
    """REDIS_URL took one node: with it down no daemon started."""
    live = redis_cluster_url.removeprefix("redis+cluster://").rstrip("/")
    url = f"redis+cluster://127.0.0.1:{free_port()},{live}/"
    with redis_at(settings, url):
        flush_redis()
        worker = start_daemon(["runworker", "--concurrency", "1"], daemon_env("redis"),
                              tmp_path / "worker.log")
        try:
            run = services.create_job("noop").runs.get()
            wait_until(lambda: all_succeeded([run.pk]), timeout=30,
                       message="the worker seeded past a dead node to run the job")
            assert worker.poll() is None
        finally:
            stop(worker)
            flush_redis()


@pytest.mark.slow
def test_a_queue_out_of_reach_holds_up_no_other_queue_of_a_lease(own_cluster, settings):
    """A lease over several queues failed whole when one queue's master could not be
    reached, so a failover held up every queue of a worker. Here the master of one
    queue and its replica are gone for good (the cluster told to serve the slots it
    still covers, so no failover window decides the outcome)."""
    for port in own_cluster.nodes:
        _cli(port, "config", "set", "cluster-require-full-coverage", "no")
    lost, *served = [names[0] for names in queues_by_master(own_cluster, 1).values()]
    with redis_at(settings, own_cluster.url):
        broker = get_broker("default", name="redis")
        for queue in (lost, *served):
            runs = make_runs("default", 2, queue=queue)
            broker.push(run_refs(Run.objects.filter(pk__in=[r.pk for r in runs])))
        nodes = redis_client(own_cluster.url).nodes_manager
        for node in nodes.slots_cache[key_slot(f"{{{lost}}}".encode())]:
            own_cluster.nodes[node.port].kill()
            own_cluster.nodes[node.port].wait()

        leases = broker.lease([lost, *served], 2, "w1", weights=dict.fromkeys(served, 1))
        leases += broker.lease([lost, *served], 10, "w1")

        assert sorted(lease.queue for lease in leases) == sorted(served * 2)
        with pytest.raises(BrokerUnavailable):
            broker.lease([lost], 2, "w1")


@pytest.mark.slow
def test_a_spread_queue_leases_from_the_shards_it_still_reaches(own_cluster, settings):
    """A lease across a spread queue's shards reads them all in one pipeline, so losing
    the master of one shard held up the whole queue (docs/isolation.md, "One queue over
    several masters"). Here shard 0's master and its replica are gone for good."""
    for port in own_cluster.nodes:
        _cli(port, "config", "set", "cluster-require-full-coverage", "no")
    settings.SCHEDULER = {"SHARDS": 3, "SPREAD_QUEUES": "default", "OWNER_CONCURRENCY": 0}
    with redis_at(settings, own_cluster.url):
        broker = get_broker("default", name="redis")
        for shard in range(3):
            runs = make_runs("default", 2, shard=shard)
            broker.push(run_refs(Run.objects.filter(pk__in=[r.pk for r in runs])))
        nodes = redis_client(own_cluster.url).nodes_manager
        lost = nodes.slots_cache[key_slot(broker.keys.ready("default", 0).encode())]
        assert {node.port for node in lost}.isdisjoint(
            node.port for shard in (1, 2)
            for node in nodes.slots_cache[key_slot(broker.keys.ready("default", shard)
                                                   .encode())])
        for node in lost:
            own_cluster.nodes[node.port].kill()
            own_cluster.nodes[node.port].wait()

        leases = broker.lease(["default"], 10, "w1")

        assert sorted(lease.shard for lease in leases) == [1, 1, 2, 2]


def test_script_calls_ask_no_node_for_their_keys(redis_cluster_url, settings):
    """The cluster pipeline sent COMMAND GETKEYS to one node before each script call, a
    round trip each, all on that node."""
    with redis_at(settings, redis_cluster_url):
        flush_redis()
        client = redis_client(redis_cluster_url)

        def key_lookups() -> int:
            return sum(node.redis_connection.info("commandstats")
                       .get("cmdstat_command|getkeys", {}).get("calls", 0)
                       for node in client.get_nodes())

        broker = get_broker("default", name="redis")
        before = key_lookups()
        for queue in ("default", "reports", "mail"):
            runs = make_runs("default", 3, queue=queue)
            broker.push(run_refs(Run.objects.filter(pk__in=[r.pk for r in runs])))
        leases = broker.lease(["default", "reports", "mail"], 9, "w1")

        assert len(leases) == 9
        assert key_lookups() == before
        flush_redis()


def test_a_dispatcher_that_cannot_reach_redis_gives_its_shards_back(settings):
    """A dispatcher whose rounds fail on the broker stops renewing its shard leases and
    gives them back, for a dispatcher that reaches Redis to take at its next renewal."""
    settings.SCHEDULER = {"SHARDS": 4, "SHARD_LEASE_TTL_S": 0.3}
    with redis_at(settings, f"redis://127.0.0.1:{free_port()}/0"):
        unreachable = get_broker("default", name="redis")
    dispatcher = Dispatcher(dispatcher_id="cut-off", broker=unreachable)

    def round_fails() -> bool:
        with pytest.raises(BrokerUnavailable):
            dispatcher.round()
        return True

    assert round_fails() and dispatcher.shards == [0, 1, 2, 3]
    wait_until(lambda: round_fails() and not dispatcher.shards, timeout=10,
               message="the shards to be given back")
    assert not ShardLease.objects.exclude(owner="").exists()


@pytest.mark.parametrize(("url", "first", "seeds"), [
    ("redis+cluster://h1:7000,h2:7001,h3/", "redis://h1:7000/",
     [("h1", 7000), ("h2", 7001), ("h3", 6379)]),
    ("redis+cluster://u:p%40ss@h1:7000,[::1]:7001/0?socket_timeout=2",
     "redis://u:p%40ss@h1:7000/0?socket_timeout=2", [("h1", 7000), ("::1", 7001)]),
    ("redis+cluster://[::1]:7000", "redis://[::1]:7000", [("::1", 7000)]),
])
def test_a_cluster_url_names_every_seed(url, first, seeds):
    assert cluster_seeds(url) == (first, seeds)


@pytest.mark.parametrize("url", ["redis+cluster://h1:7000,:7001/",
                                 "redis+cluster://h1:70000/", "redis+cluster://h1:x/"])
def test_a_bad_seed_is_an_error_naming_redis_url(url):
    with pytest.raises(ImproperlyConfigured, match="REDIS_URL"):
        cluster_seeds(url)


def test_several_hosts_in_a_plain_redis_url_are_refused():
    with pytest.raises(ImproperlyConfigured, match="redis\\+cluster://"):
        redis_client("redis://h1:6379,h2:6379/0")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "scheduler_project.settings",
           "REDIS_URL": "redis://h1:6379,h2:6379/0"}
    out = subprocess.run([sys.executable, "-c", "import django; django.setup()"], env=env,
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode != 0
    assert "REDIS_URL lists several hosts" in out.stderr

