"""Dramatiq actors for the bench: Redis broker on db 3, results in Redis (Results middleware)."""

import time

import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker
from dramatiq.results import Results
from dramatiq.results.backends import RedisBackend

REDIS_URL = "redis://127.0.0.1:6379/3"
QUEUE = "default"
STARTS_KEY = "bench:starts"

broker = RedisBroker(url=REDIS_URL)
# Dramatiq keeps no history of its own: the Results middleware is its only store of
# outcomes, so W2 counts completion through it. Prefixed keys let the adapter count them.
result_backend = RedisBackend(url=REDIS_URL, use_namespace_prefix_keys=True)
broker.add_middleware(Results(backend=result_backend))
dramatiq.set_broker(broker)

_client = None


def _redis():
    global _client
    if _client is None:
        _client = redis.Redis.from_url(REDIS_URL)
    return _client


@dramatiq.actor(queue_name=QUEUE, store_results=True)
def noop():
    """The W1/W2/W6 handler: does nothing."""
    return None


@dramatiq.actor(queue_name=QUEUE, store_results=True)
def mark(scheduled):
    """The W3 handler: records 'scheduled start' (epoch seconds) at its start."""
    _redis().rpush(STARTS_KEY, f"{scheduled} {time.time()}")
    return None
