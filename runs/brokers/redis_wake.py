"""Waking idle workers on the Redis broker (docs/architecture.md, "runworker").

An idle worker used to sleep out WORKER_POLL_S (50 ms) between empty leases, so a run
pushed to an idle system waited 25 ms on average before a lease saw it (a workflow's
first node, an API call's one-off job). Now each push of runs ready now adds tokens to a
list per queue (keys.wake) and an idle worker blocks on its queues' lists (BLPOP) for as
long as it would have slept: a push wakes it at once, as Celery's and RQ's workers wake
on their BRPOP. The tokens are hints only: the lease that follows is what takes runs, a
lost token costs at most one poll, a spare one one empty lease.
"""

import time
from collections import Counter

from runs.brokers.redis_wire import translate_errors
from runs.clock import to_ms
from runs.types import RunRef

# Most tokens a queue's list holds: one per run a push makes ready, up to this many, so a
# push of many runs wakes as many idle workers, and tokens left by pushes no worker
# waited for cost the next idle workers at most this many empty leases.
WAKE_TOKENS = 32
# Longest one wait blocks, whatever WORKER_POLL_S says: under the client's socket_timeout
# (5 s, runs/brokers/redis_wire.py), past which redis-py gives up on the BLOCKed reply and
# the idle wait failed as "Redis unreachable". A wait cut short costs one empty lease a
# second of idleness, and bounds how long a SIGTERMed idle worker waits for its lease lane.
WAKE_WAIT_MAX_S = 1.0


class RedisWake:
    """A mixin of runs/brokers/redis.py's RedisBroker: ``client`` and ``keys`` are its."""

    def _wake_into(self, pipe, runs: list[RunRef]) -> None:
        """Queue on ``pipe`` (a redis-py pipeline) the tokens for ``runs`` being pushed:
        one per run due now (by this process's clock, to the rounded-up millisecond of
        clock.to_ms), at most WAKE_TOKENS per queue."""
        now_ms = time.time() * 1000 + 1
        due = Counter(ref.queue for ref in runs if to_ms(ref.run_at) <= now_ms)
        for queue, count in due.items():
            key = self.keys.wake(queue)
            pipe.lpush(key, *["1"] * min(count, WAKE_TOKENS))
            pipe.ltrim(key, 0, WAKE_TOKENS - 1)

    @translate_errors
    def wait_ready(self, queues: list[str], timeout_s: float) -> bool:
        """As Broker.wait_ready: block up to ``timeout_s`` seconds, at most
        WAKE_WAIT_MAX_S (Redis takes fractions, to the millisecond), on the wake lists of
        ``queues``; True."""
        if timeout_s <= 0 or not queues:
            return False
        timeout_s = min(timeout_s, WAKE_WAIT_MAX_S)
        self.client.blpop([self.keys.wake(queue) for queue in queues],
                          timeout=max(round(timeout_s, 3), 0.001))
        return True
