"""Dramatiq actors for the bench: Redis broker on db 3, Dramatiq's default middleware (no
Results middleware: Dramatiq stores no results unless asked to)."""

import os
import time

import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker

REDIS_URL = f"redis://127.0.0.1:{os.environ.get('BENCH_REDIS_PORT', '6379')}/3"
QUEUE = "default"
STARTS_KEY = "bench:starts"

broker = RedisBroker(url=REDIS_URL)
dramatiq.set_broker(broker)

_client = None


def _redis():
    global _client
    if _client is None:
        _client = redis.Redis.from_url(REDIS_URL)
    return _client


@dramatiq.actor(queue_name=QUEUE)
def noop():
    """The W1/W2/W6 handler: does nothing."""
    return None


@dramatiq.actor(queue_name=QUEUE)
def mark(scheduled):
    """The W3 handler: records 'scheduled start' (epoch seconds) at its start."""
    _redis().rpush(STARTS_KEY, f"{scheduled} {time.time()}")
    return None
