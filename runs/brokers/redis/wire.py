"""The wire to Redis for the Redis broker: one client per URL (a plain ``redis.Redis``, or
redis-py's ``RedisCluster`` for ``redis+cluster://``, seeded from one or several nodes:
docs/scaling.md, "A Redis Cluster"), pipelines of Lua scripts by EVALSHA that run a
script by EVAL when Redis answers NOSCRIPT (after a restart, a failover or SCRIPT FLUSH;
redis-py's Script objects in a pipeline send SCRIPT EXISTS before every pipeline, a round
trip per lease and per ack, BENCHMARKS.md), and every connection and cluster error
translated to BrokerUnavailable at this boundary (docs/architecture.md, "Conventions in
the code").

EVALSHA is sent with ``execute_command`` because the cluster pipeline refuses its
``evalsha`` method. The cluster client routes it by the slot of its keys, which must all
share one (runs/brokers/redis/keys.py), read from the call itself (ScriptRouting): redis-py's
pipeline otherwise asks one fixed node for every script call's keys (COMMAND GETKEYS), a
round trip each, and while that node is down every script call of the process fails,
whichever master serves its keys.
"""

import functools
import hashlib
import logging
from urllib.parse import unquote

import redis
from django.core.exceptions import ImproperlyConfigured
from redis._parsers.commands import CommandPolicies, RequestPolicy, ResponsePolicy
from redis.cluster import ClusterNode, RedisCluster
from redis.commands.policies import PolicyResolver, StaticPolicyResolver
from redis.exceptions import RedisClusterException
from redis.utils import HIREDIS_AVAILABLE

from scheduler_core.exceptions import BrokerUnavailable

if HIREDIS_AVAILABLE:
    import hiredis
else:
    hiredis = None

log = logging.getLogger("scheduler.broker")
CLUSTER_SCHEME = "redis+cluster://"
# What "Redis cannot serve this now" looks like from redis-py: the connection errors
# (refused, reset, timed out, MaxConnectionsError, BusyLoadingError), a cluster without a
# master for a slot (ClusterDownError, MasterDownError, SlotNotCoveredError), a slot in
# migration (TryAgainError), a write that reached a master demoted by a failover
# (ReadOnlyError), and redis-py's own cluster failures, which are not RedisErrors at all
# (RedisClusterException: no seed node answers, the slot map cannot be rebuilt).
UNAVAILABLE = (redis.ConnectionError, redis.TimeoutError, redis.exceptions.ClusterError,
               redis.exceptions.TryAgainError, redis.exceptions.ReadOnlyError,
               RedisClusterException, BrokerUnavailable)
_KEYED = CommandPolicies(request_policy=RequestPolicy.DEFAULT_KEYED,
                         response_policy=ResponsePolicy.DEFAULT_KEYED)


def is_cluster_url(url: str) -> bool:
    """Whether ``url`` names a Redis Cluster (``redis+cluster://host:port[,host:port...]/``)."""
    return url.startswith(CLUSTER_SCHEME)


def translate_errors(method):
    """Re-raise the errors of UNAVAILABLE as BrokerUnavailable (docs/architecture.md,
    "Conventions in the code"): callers wait and retry, or leave the push to reconcile."""

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except BrokerUnavailable:
            raise
        except UNAVAILABLE as exc:
            raise BrokerUnavailable(f"Redis is unreachable: {type(exc).__name__}: {exc}"
                                    ) from exc

    return wrapper


class Pipe:
    """A non-transactional pipeline of Lua script calls by EVALSHA (and any other
    commands, through ``pipe``). ``execute`` returns the replies in order; a call answered
    NOSCRIPT is run again by EVAL, which also caches the script on that node, so each
    script runs once per call. (SCRIPT LOAD went to every master of a cluster: with one
    of them down, no node lacking a script could be given it.)

    The calls of ``script`` and ``hint`` are held here, and on a single Redis sent by
    ``exchange`` on a connection of the client's pool: redis-py's pipeline object, made
    only once ``pipe`` is asked for (and then carrying them), cost a push twice the CPU
    of its wire work (docs/performance.md, "The cost of an enqueue")."""

    def __init__(self, client: redis.Redis | RedisCluster, scripts: dict[str, str]):
        self.client = client
        self.scripts = scripts  # name -> Lua source
        self._pipe = None
        self.held: list[tuple] = []  # commands queued while there is no redis-py pipeline
        self.calls: dict[int, tuple[str, list, list]] = {}  # reply index -> call
        self.hints: set[int] = set()  # reply indexes whose errors are not raised

    @property
    def pipe(self):
        """redis-py's pipeline, for commands queued by its methods (whose options shape
        their replies): made at the first use, with the commands held so far."""
        if self._pipe is None:
            self._pipe = self.client.pipeline(transaction=False)
            for command in self.held:
                self._pipe.execute_command(*command)
        return self._pipe

    def _queue(self, command: tuple) -> int:
        """Queue ``command``; returns the index of its reply."""
        if self._pipe is None:
            self.held.append(command)
            return len(self.held) - 1
        self._pipe.execute_command(*command)
        return len(self._pipe) - 1

    def script(self, name: str, keys: list, args: list) -> None:
        """Queue script ``name`` with ``keys`` (one slot on a cluster) and ``args``."""
        index = self._queue(("EVALSHA", script_sha(self.scripts[name]), len(keys), *keys,
                             *args))
        self.calls[index] = (name, keys, args)

    def command(self, *command) -> None:
        """Queue ``command`` (e.g. "SADD", key, member); its reply is redis-py's."""
        self._queue(command)

    def hint(self, *command) -> None:
        """Queue ``command`` (e.g. "LPUSH", key, value), a hint whose refusal is logged,
        never raised: the calls beside it stand without it (wake.py)."""
        self.hints.add(self._queue(command))

    def execute(self) -> list:
        """Send everything queued; raises the first error other than NOSCRIPT, or one of
        a hint's (then logged)."""
        if self._pipe is None and isinstance(self.client, redis.Redis):
            replies = exchange(self.client, self.held)
        else:
            replies = self.pipe.execute(raise_on_error=False)
        for index, reply in enumerate(replies):
            if isinstance(reply, redis.exceptions.NoScriptError) and index in self.calls:
                name, keys, args = self.calls[index]
                replies[index] = self.client.eval(self.scripts[name], len(keys), *keys, *args)
        for index, reply in enumerate(replies):
            if isinstance(reply, Exception):
                if index not in self.hints:
                    raise reply
                log.debug("a hint was refused (%s); the calls beside it stand", reply)
        return replies


def exchange(client: redis.Redis, commands: list[tuple]) -> list:
    """Send ``commands`` (tuples of a command's name and arguments, no options) to
    ``client``'s server in one write on a connection of its pool; returns their replies
    in order, each through the client's response callback as redis-py's pipeline gives
    it, an error reply as its ResponseError. A connection error is retried as the
    pipeline retries it (the connection's Retry, reconnecting), then raised."""
    if not commands:
        return []
    pool = client.connection_pool
    connection = pool.get_connection()
    try:
        return connection.retry.call_with_retry(
            lambda: _exchange_on(connection, client.response_callbacks, commands),
            lambda error: connection.disconnect())
    finally:
        pool.release(connection)


def _exchange_on(connection, callbacks, commands: list[tuple]) -> list:
    connection.send_packed_command(_packed(connection, commands))
    replies = []
    for command in commands:  # every reply is read, so the connection stays in step
        try:
            reply = connection.read_response()
        except redis.ResponseError as exc:
            reply = exc
        else:
            if command[0] in callbacks:
                reply = callbacks[command[0]](reply)
        replies.append(reply)
    return replies


def _packed(connection, commands: list[tuple]) -> list[bytes]:
    """``commands`` in the Redis protocol, in pieces of about PIECE_BYTES (each write has
    the socket's timeout): by hiredis at once when each is a one-word command (letters
    only) of str, bytes and numbers (ours are), else by ``connection``. redis-py's own
    packing looks at each argument first, a third of a 10,000-run push's CPU."""
    if hiredis is None or not all(type(c[0]) is str and c[0].isalpha() for c in commands):
        return connection.pack_commands(commands)
    try:
        packed = [hiredis.pack_command(command) for command in commands]
    except TypeError:  # an argument hiredis cannot send (memoryview, bytearray)
        return connection.pack_commands(commands)
    pieces, piece, size = [], [], 0
    for one in packed:
        piece.append(one)
        size += len(one)
        if size >= PIECE_BYTES:
            pieces.append(b"".join(piece))
            piece, size = [], 0
    if piece:
        pieces.append(b"".join(piece))
    return pieces


# About what one write of a pipe sends: a 10,000-run push is some 50 of them.
PIECE_BYTES = 64 * 1024


class Wire:
    """The wire of one Redis broker: the client of ``url`` (redis_client, looked up at
    each use, so a cluster no seed of which answers raises inside the translated call
    that needs it) and pipelines of the Lua scripts ``sources`` (name -> source) over
    it. Every part of the broker (wake.py, inspection.py, limits.py, books.py) talks to
    Redis through the broker's one Wire."""

    def __init__(self, url: str, sources: dict[str, str]):
        self.url = url
        self.sources = sources

    @property
    def client(self) -> redis.Redis | RedisCluster:
        """The client of ``url`` (redis_client: one per process and URL)."""
        return redis_client(self.url)

    def pipe(self) -> Pipe:
        """A new pipeline of script calls (and any command, through its ``pipe``)."""
        return Pipe(redis_client(self.url), self.sources)

    def script(self, name: str, keys: list, args: list):
        """Run one script (EVALSHA, EVAL on NOSCRIPT); returns its reply."""
        pipe = self.pipe()
        pipe.script(name, keys, args)
        return pipe.execute()[0]


@functools.cache
def script_sha(source: str) -> str:
    """The SHA1 EVALSHA names the Lua script ``source`` by."""
    return hashlib.sha1(source.encode()).hexdigest()


class ScriptRouting(PolicyResolver):
    """Route EVAL and EVALSHA by their declared keys (``numkeys`` and the keys after it,
    which redis-py reads locally), everything else as redis-py's static policies say.
    Without it the cluster pipeline resolves a script's keys by COMMAND GETKEYS at the
    client's default node."""

    def __init__(self, fallback: PolicyResolver | None = None):
        self.fallback = fallback or StaticPolicyResolver()

    def resolve(self, command_name: str) -> CommandPolicies | None:
        """The routing of ``command_name`` (lower case, e.g. "evalsha")."""
        if command_name in ("evalsha", "eval"):
            return _KEYED
        return self.fallback.resolve(command_name)

    def with_fallback(self, fallback: PolicyResolver) -> PolicyResolver:
        """This resolver in front of ``fallback``."""
        return ScriptRouting(fallback)


class ScriptRoutedCluster(RedisCluster):
    """RedisCluster whose pipelines route scripts as the client does: redis-py 8's
    ``pipeline()`` leaves out the client's policy resolver, so its pipelines fall back
    to asking the default node for a script's keys."""

    def pipeline(self, transaction=None, shard_hint=None):
        """As RedisCluster.pipeline, with this client's script routing."""
        pipe = super().pipeline(transaction, shard_hint)
        pipe._policy_resolver = self._policy_resolver
        return pipe


def cluster_seeds(url: str) -> tuple[str, list[tuple[str, int]]]:
    """Split a ``redis+cluster://[user:password@]host:port[,host:port...][/0][?options]``
    URL into a ``redis://`` URL of its first seed (credentials, database and options
    kept, for redis-py's own parsing) and the ``(host, port)`` of every seed. Raises
    ImproperlyConfigured naming REDIS_URL for a seed without a host or with a bad port."""
    rest = url[len(CLUSTER_SCHEME):]
    netloc, sep, tail = rest.partition("/")
    if not sep:
        netloc, sep, tail = rest.partition("?")
        tail = f"?{tail}" if sep else ""
    else:
        tail = f"/{tail}"
    userinfo, at, hosts = netloc.rpartition("@")
    seeds = []
    for seed in hosts.split(","):
        host, colon, port = seed.strip().rpartition(":")
        if not colon or host.endswith(":"):  # "h" alone, or a bare IPv6 address
            host, port = seed.strip(), "6379"
        host = unquote(host.strip("[]"))
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ImproperlyConfigured(
                f"REDIS_URL: {seed.strip()!r} is not a host:port (a Redis Cluster's URL is "
                "redis+cluster://host:port[,host:port...]/)")
        seeds.append((host, int(port)))
    first_host, first_port = seeds[0]
    shown = f"[{first_host}]" if ":" in first_host else first_host
    return f"redis://{userinfo}{at}{shown}:{first_port}{tail}", seeds


@functools.cache
def redis_client(url: str) -> redis.Redis | RedisCluster:
    """The client of ``url``, one per process and URL (5 s socket timeouts):
    ``redis+cluster://`` gives a RedisCluster seeded from each node the URL lists (any
    one answering is enough; it discovers the others), anything else a redis.Redis.
    Raises BrokerUnavailable when no seed of a cluster answers (the next call tries
    again), ImproperlyConfigured for a malformed URL."""
    options = {"socket_timeout": 5, "socket_connect_timeout": 5}
    if not is_cluster_url(url):
        if "," in url.partition("://")[2].partition("/")[0]:
            raise ImproperlyConfigured(
                "REDIS_URL lists several hosts: that is a Redis Cluster's URL, "
                "redis+cluster://host:port,host:port/ (docs/scaling.md)")
        return redis.Redis.from_url(url, health_check_interval=30, **options)
    first, seeds = cluster_seeds(url)
    try:
        return ScriptRoutedCluster.from_url(
            first, startup_nodes=[ClusterNode(host, port) for host, port in seeds[1:]],
            policy_resolver=ScriptRouting(), **options)
    except UNAVAILABLE as exc:
        raise BrokerUnavailable(f"no seed node of the Redis Cluster answers ({exc})") from exc
