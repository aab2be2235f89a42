"""Waking idle workers on the Redis broker (docs/architecture.md, "runworker").

An idle worker used to sleep out WORKER_POLL_S (50 ms) between empty leases, so a run
pushed to an idle system waited 25 ms on average before a lease saw it (a workflow's
first node, an API call's one-off job). Now each push of runs ready now adds tokens to a
list per queue (keys.wake) and an idle worker blocks on its queues' lists (BLPOP) for as
long as it would have slept: a push wakes it at once, as Celery's and RQ's workers wake
on their BRPOP. The tokens are hints only: the lease that follows is what takes runs, a
lost token costs at most one poll, a spare one one empty lease.

Two limits shape the wait. Redis checks a blocked client's timeout at its event loop's
ticks (``hz``, 10 a second by default), so a BLPOP may return up to WAIT_SLACK_S after
its timeout: a worker whose next run falls due sooner than its wait plus that slack
sleeps in its own process instead, to the millisecond, and a push of runs due before a
blocked wait could end (within WORKER_POLL_S, at most WAKE_WAIT_MAX_S, plus the slack)
leaves tokens too, so a worker blocked when such a run arrives comes back to wait for it
exactly. And redis-py gives up on a reply after the client's socket timeout (5 s,
or the URL's ``socket_timeout``): one wait blocks at most half of it, and WAKE_WAIT_MAX_S.
"""

import logging
import time
from collections import Counter
from collections.abc import Callable

import redis

from runs.brokers.redis.keys import Keys
from runs.brokers.redis.wire import UNAVAILABLE, Pipe, Wire
from runs.clock import to_ms
from runs.types import RunRef
from scheduler_core import conf

log = logging.getLogger("scheduler.broker")

# Most tokens a queue's list holds: one per run a push makes ready, up to this many, so a
# push of many runs wakes as many idle workers, and tokens left by pushes no worker
# waited for cost the next idle workers at most this many empty leases.
WAKE_TOKENS = 32
# Longest one wait blocks, whatever WORKER_POLL_S says (and at most half the client's
# socket timeout): a wait cut short costs one empty lease a second of idleness, and
# bounds how long a SIGTERMed idle worker waits for its lease lane.
WAKE_WAIT_MAX_S = 1.0
# How late a BLPOP may return after its timeout: one tick of Redis's event loop at its
# default hz of 10 (redis.conf, "hz").
WAIT_SLACK_S = 0.1


def socket_timeout_s(client) -> float | None:
    """The socket timeout (seconds) of ``client`` (redis.Redis or RedisCluster), None
    for none."""
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        kwargs = pool.connection_kwargs
    else:
        kwargs = getattr(getattr(client, "nodes_manager", None), "connection_kwargs", {})
    timeout = kwargs.get("socket_timeout")
    return float(timeout) if timeout else None


class WakeLists:
    """The wake lists of one broker (``keys.wake``), written after pushes and blocked on
    by idle workers, through ``wire``."""

    def __init__(self, wire: Wire, keys: Keys):
        self.wire = wire
        self.keys = keys

    def into(self, pipe: Pipe, runs: list[RunRef]) -> Counter:
        """The wake tokens for a push of ``runs`` (one per run due before a blocked wait
        could end: now, or within WORKER_POLL_S, at most WAKE_WAIT_MAX_S, plus
        WAIT_SLACK_S, by this process's clock; at most WAKE_TOKENS per queue), queued on
        the push's own redis-py ``pipe`` on a single Redis, the queues' own server, so a
        push and its wake are one round trip. Returns the tokens left for ``send``: all
        of them on a cluster, where the lists' slot may be on a master that is down while
        the queues' are up, and the push must not fail for a hint."""
        ahead_s = min(conf.get("WORKER_POLL_S"), WAKE_WAIT_MAX_S) + WAIT_SLACK_S
        horizon_ms = (time.time() + ahead_s) * 1000 + 1
        due = Counter(ref.queue for ref in runs if to_ms(ref.run_at) <= horizon_ms)
        if due and not self.keys.cluster:
            self._tokens_into(pipe, due)
            return Counter()
        return due

    def send(self, due: Counter) -> None:
        """Send ``due`` (queue -> runs due, from ``into``) in a call of its own whose
        failure is only logged."""
        if not due:
            return
        try:
            pipe = self.wire.pipe()
            self._tokens_into(pipe, due)
            pipe.execute()
        except (*UNAVAILABLE, redis.RedisError, OSError) as exc:
            log.debug("wake tokens not sent (idle workers find the runs at their next "
                      "poll): %s", exc)

    def _tokens_into(self, pipe: Pipe, due: Counter) -> None:
        for queue, count in due.items():
            key = self.keys.wake(queue)
            pipe.hint("LPUSH", key, *["1"] * min(count, WAKE_TOKENS))
            pipe.hint("LTRIM", key, 0, WAKE_TOKENS - 1)

    def wait(self, queues: list[str], timeout_s: float,
             passing_on: Callable[[], bool] | None = None) -> bool:
        """Broker.wait_ready on Redis: block up to ``timeout_s`` seconds, at most
        WAKE_WAIT_MAX_S and half the client's socket timeout (Redis takes fractions, to
        the millisecond), on the wake lists of ``queues``; True. False (no wait: the
        caller sleeps itself) when that leaves no time to wait, or when the lists cannot
        be read: they are hints, and on a cluster their master may be down while the
        queues' are up (the lease, not this, reports an unreachable Redis). A token taken
        while ``passing_on()`` says the caller will not lease goes back to its list: a
        worker told to stop in its wait swallowed it, and another idle worker slept out
        its wait (up to WAKE_WAIT_MAX_S) before starting the run it announced."""
        client = self.wire.client
        limit = socket_timeout_s(client)
        timeout_s = min(timeout_s, WAKE_WAIT_MAX_S,
                        float("inf") if limit is None else limit / 2)
        if timeout_s < 0.001 or not queues:
            return False
        try:
            token = client.blpop([self.keys.wake(queue) for queue in queues],
                                 timeout=round(timeout_s, 3))
            if token is not None and passing_on is not None and passing_on():
                client.lpush(*token)
        except (*UNAVAILABLE, redis.RedisError, OSError) as exc:
            log.debug("wake lists not readable, polling: %s", exc)
            return False
        return True
