"""The wire to Redis for the Redis broker: one client per URL, pipelines of Lua scripts by
EVALSHA that load a script again when Redis answers NOSCRIPT (after a restart or SCRIPT
FLUSH; redis-py's Script objects in a pipeline send SCRIPT EXISTS before every pipeline,
a round trip per lease and per ack, BENCHMARKS.md), and Redis connection errors
translated to BrokerUnavailable at this boundary (docs/architecture.md, "Conventions in
the code").
"""

import functools
import hashlib

import redis

from scheduler_core.exceptions import BrokerUnavailable


def translate_errors(method):
    """Re-raise redis connection errors as BrokerUnavailable (docs/architecture.md,
    "Conventions in the code")."""

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise BrokerUnavailable(f"Redis is unreachable: {exc}") from exc

    return wrapper


class Pipe:
    """A non-transactional pipeline of Lua script calls by EVALSHA (and any other
    commands, through ``pipe``). ``execute`` returns the replies in order; a call answered
    NOSCRIPT is loaded and run again, so each script runs once per call."""

    def __init__(self, client: redis.Redis, scripts: dict[str, str]):
        self.client = client
        self.scripts = scripts  # name -> Lua source
        self.pipe = client.pipeline(transaction=False)
        self.calls: dict[int, tuple[str, list, list]] = {}  # reply index -> call

    def script(self, name: str, keys: list, args: list) -> None:
        """Queue script ``name`` with ``keys`` and ``args``."""
        self.calls[len(self.pipe)] = (name, keys, args)
        self.pipe.evalsha(script_sha(self.scripts[name]), len(keys), *keys, *args)

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
def redis_client(url: str) -> redis.Redis:
    """The client of ``url``, one per process and URL (5 s socket timeouts)."""
    return redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5,
                                health_check_interval=30)
