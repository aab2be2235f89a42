"""RQ job functions for the bench (Redis db 2)."""

import os
import time

import redis

REDIS_URL = f"redis://127.0.0.1:{os.environ.get('BENCH_REDIS_PORT', '6379')}/2"
STARTS_KEY = "bench:starts"

_client = None


def _redis():
    global _client
    if _client is None:
        _client = redis.Redis.from_url(REDIS_URL)
    return _client


def noop():
    """The W1/W2/W6 handler: does nothing."""
    return None


def mark(scheduled):
    """The W3 handler: records 'scheduled start' (epoch seconds) at its start."""
    _redis().rpush(STARTS_KEY, f"{scheduled} {time.time()}")


def mark_cron():
    """The W4 handler: records its start (epoch seconds)."""
    _redis().rpush(STARTS_KEY, repr(time.time()))
