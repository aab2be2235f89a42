"""The cluster-failover scenario: the broker on a 3-master, 3-replica Redis Cluster, and the
master serving the load's queue SIGKILLed mid-load, so the cluster promotes its replica;
later the dead node comes back, empty, and rejoins as a replica (docs/reliability.md,
"Scenarios"; docs/isolation.md, "Redis Cluster")."""

import signal
import time
from pathlib import Path

from redis.crc import key_slot

from chaos.redis_cluster import RedisCluster
from chaos.session import Scenario, Session, Size
from runs.brokers.redis.wire import redis_client

QUEUE = "default"  # the queue chaos.load's jobs use; on a cluster all its keys share a slot


def master_of(cluster: RedisCluster, queue: str) -> int:
    """The port of the master serving the slot of ``queue``'s keys now."""
    node = redis_client(cluster.url).nodes_manager.get_node_from_slot(
        key_slot(f"{{{queue}}}".encode()))
    return node.port


class ClusterFailover(Scenario):
    """SIGKILL the master holding the load's queue at 1/3 of the window; the cluster
    promotes its replica (cluster-node-timeout 2 s); at 2/3 the killed node starts again
    without data and rejoins as a replica. The daemons must not exit, and every invariant
    holds: what the promoted replica had not yet received (replication is asynchronous)
    is pushed again from the database by reconcile, and a lease it lost is fenced."""

    name = "cluster-failover"
    short = Size(one_off=300, cron=30, duration_s=15)
    long = Size(one_off=10_000, cron=300, duration_s=150, workers=4, concurrency=3)

    def redis_server(self, workdir: Path) -> RedisCluster:
        return RedisCluster(workdir=workdir / "redis-cluster")

    def inject(self, s: Session) -> None:
        cluster: RedisCluster = s.cluster.redis
        window = s.size.duration_s
        s.tick(window / 3)
        victim = master_of(cluster, QUEUE)
        outage = s.fault("SIGKILL", f"redis master 127.0.0.1:{victim} (slot of {{{QUEUE}}})")
        cluster.nodes[victim].send_signal(signal.SIGKILL)
        cluster.nodes[victim].wait()
        began = time.monotonic()
        while time.monotonic() - began < 60:
            s.tick(0.2)
            if victim not in cluster.masters() and len(cluster.masters()) == 3 \
                    and cluster.cluster_ok():
                s.extra["failover_s"] = round(time.monotonic() - began, 1)
                break
        outage.ended_at = time.time()
        s.say(f"masters now {cluster.masters()}; failover took {s.extra.get('failover_s')} s")
        s.tick(max(0.0, s.left() - window / 3))
        s.fault("restart empty", f"redis node 127.0.0.1:{victim}")
        cluster.start_node(victim)
        s.until_deadline()

    def verify(self, s: Session) -> None:
        if "failover_s" not in s.extra:
            s.result.failures.append("the killed master's replica was never promoted")
            return
        s.result.notes.append(
            f"slot of {{{QUEUE}}} served again {s.extra['failover_s']} s after its master "
            f"was killed (cluster-node-timeout 2 s)")
