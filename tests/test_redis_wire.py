"""The Redis broker's pipelines (runs/brokers/redis/wire.py, Pipe): on a single Redis the
calls of ``script``, ``command`` and ``hint`` go out in one write on a pooled connection,
on a cluster through redis-py's pipeline; either way the replies come back in order as
redis-py gives them, a script Redis does not hold yet runs by EVAL, a refused hint is
only logged and any other error is raised, and the connection stays in step after an
error reply."""

import os
import uuid

import pytest
import redis
from django.conf import settings

from runs.brokers.redis.wire import Pipe, redis_client

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def wire(redis_kind):
    """(client, a key prefix of this test's own sharing one cluster slot)."""
    prefix = f"{os.environ['SCHEDULER_REDIS_PREFIX']}:{{wire}}:{uuid.uuid4().hex}"
    return redis_client(settings.REDIS_URL), prefix


def test_replies_come_back_in_order_as_redis_py_gives_them(wire):
    client, prefix = wire
    # A source no server has seen: EVALSHA answers NOSCRIPT and the call runs by EVAL.
    scripts = {"echo": f"-- {uuid.uuid4().hex}\nreturn {{KEYS[1], ARGV[1]}}"}
    pipe = Pipe(client, scripts)
    pipe.command("SADD", f"{prefix}:set", "a")
    pipe.script("echo", [f"{prefix}:k"], ["v"])
    pipe.hint("LPUSH", f"{prefix}:list", "1")
    pipe.hint("LTRIM", f"{prefix}:list", 0, 31)

    assert pipe.execute() == [1, [f"{prefix}:k".encode(), b"v"], 1, True]
    assert client.smembers(f"{prefix}:set") == {b"a"}


def test_a_refused_hint_is_passed_over_and_a_refused_command_raised(wire):
    client, prefix = wire
    client.set(f"{prefix}:text", "x")
    pipe = Pipe(client, {})
    pipe.hint("LPUSH", f"{prefix}:text", "1")  # WRONGTYPE
    pipe.command("SADD", f"{prefix}:set", "a")
    assert pipe.execute()[1] == 1

    pipe = Pipe(client, {})
    pipe.command("SADD", f"{prefix}:text", "a")  # WRONGTYPE
    pipe.command("SADD", f"{prefix}:set", "b")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        pipe.execute()
    # Every reply was read: the connection the pool hands out next is in step.
    assert client.smembers(f"{prefix}:set") == {b"a", b"b"}
    assert client.get(f"{prefix}:text") == b"x"


def test_commands_of_redis_pys_pipeline_keep_their_place_and_parsing(wire):
    client, prefix = wire
    client.zadd(f"{prefix}:z", {"m": 2})
    pipe = Pipe(client, {})
    pipe.command("SADD", f"{prefix}:set", "a")
    pipe.pipe.zrange(f"{prefix}:z", 0, 0, withscores=True)
    pipe.hint("LPUSH", f"{prefix}:list", "1")

    assert pipe.execute() == [1, [(b"m", 2.0)], 1]


@pytest.mark.parametrize("commands", [
    [("SADD", "k", "a", b"b", 7, 2.5, "é"), ("EVALSHA", "0" * 40, 1, "key", -3, "")],
    [("SCRIPT LOAD", "return 1")],  # a two-word name: redis-py's packing splits it
    [("SET", "k", memoryview(b"v"))],  # an argument hiredis does not take
    [(b"SET", "k", "v"), ("SET\tX", "k")],  # a name in bytes, or with other whitespace
    [("ZADD", "z", i, "m" * 100) for i in range(2000)],  # more than one piece
])
def test_one_write_holds_what_redis_pys_packing_gives(wire, commands):
    from runs.brokers.redis.wire import _packed

    client, _ = wire
    if not isinstance(client, redis.Redis):
        pytest.skip("a cluster's calls go through redis-py's pipeline")
    connection = client.connection_pool.get_connection()
    try:
        assert b"".join(_packed(connection, commands)) == b"".join(
            bytes(chunk) for chunk in connection.pack_commands(commands))
    finally:
        client.connection_pool.release(connection)
