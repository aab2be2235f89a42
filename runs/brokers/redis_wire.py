"""The wire to Redis for the Redis broker: one client per URL (a plain ``redis.Redis``, or
redis-py's ``RedisCluster`` for ``redis+cluster://host:port/``, docs/isolation.md, "Redis
Cluster"), pipelines of Lua scripts by EVALSHA that load a script again when Redis
answers NOSCRIPT (after a restart, a failover or SCRIPT FLUSH; redis-py's Script objects
in a pipeline send SCRIPT EXISTS before every pipeline, a round trip per lease and per
ack, BENCHMARKS.md), and Redis connection errors translated to BrokerUnavailable at this
boundary (docs/architecture.md, "Conventions in the code").

EVALSHA is sent with ``execute_command`` because the cluster pipeline refuses its
``evalsha`` method; the cluster client routes the call by the slot of its keys, which
must all share one (runs/brokers/keys.py).
"""

import functools
import hashlib

import redis
from redis.cluster import RedisCluster

from scheduler_core.exceptions import BrokerUnavailable

CLUSTER_SCHEME = "redis+cluster://"


def is_cluster_url(url: str) -> bool:
    """Whether ``url`` names a Redis Cluster (``redis+cluster://host:port/``)."""
    return url.startswith(CLUSTER_SCHEME)


def translate_errors(method):
    """Re-raise redis connection errors as BrokerUnavailable (docs/architecture.md,
    "Conventions in the code"); on a cluster, also a slot left unserved while a lost
    master is failed over (CLUSTERDOWN, or a slot map without it)."""

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except (redis.ConnectionError, redis.TimeoutError, redis.exceptions.ClusterError,
                redis.exceptions.SlotNotCoveredError) as exc:
            raise BrokerUnavailable(f"Redis is unreachable: {exc}") from exc

    return wrapper


class Pipe:
    """A non-transactional pipeline of Lua script calls by EVALSHA (and any other
    commands, through ``pipe``). ``execute`` returns the replies in order; a call answered
    NOSCRIPT is loaded and run again, so each script runs once per call."""

    def __init__(self, client: redis.Redis | RedisCluster, scripts: dict[str, str]):
        self.client = client
        self.scripts = scripts  # name -> Lua source
        self.pipe = client.pipeline(transaction=False)
        self.calls: dict[int, tuple[str, list, list]] = {}  # reply index -> call

    def script(self, name: str, keys: list, args: list) -> None:
        """Queue script ``name`` with ``keys`` (one slot on a cluster) and ``args``."""
        self.calls[len(self.pipe)] = (name, keys, args)
        self.pipe.execute_command("EVALSHA", script_sha(self.scripts[name]), len(keys),
                                  *keys, *args)

    def execute(self) -> list:
        """Send everything queued; raises the first error other than NOSCRIPT."""
        replies = self.pipe.execute(raise_on_error=False)
        for index, reply in enumerate(replies):
            if isinstance(reply, redis.exceptions.NoScriptError) and index in self.calls:
                name, keys, args = self.calls[index]
                self.client.script_load(self.scripts[name])
                replies[index] = self.client.evalsha(script_sha(self.scripts[name]), len(keys),
                                                     *keys, *args)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies


@functools.cache
def script_sha(source: str) -> str:
    """The SHA1 EVALSHA names the Lua script ``source`` by."""
    return hashlib.sha1(source.encode()).hexdigest()


@functools.cache
def redis_client(url: str) -> redis.Redis | RedisCluster:
    """The client of ``url``, one per process and URL (5 s socket timeouts):
    ``redis+cluster://`` gives a RedisCluster seeded from that node (it discovers the
    others), anything else a redis.Redis."""
    options = {"socket_timeout": 5, "socket_connect_timeout": 5}
    if is_cluster_url(url):
        return RedisCluster.from_url("redis://" + url[len(CLUSTER_SCHEME):], **options)
    return redis.Redis.from_url(url, health_check_interval=30, **options)
