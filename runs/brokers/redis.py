"""The Redis broker: sorted sets and Lua scripts (DESIGN.md, "Redis layout").

Per queue shard: ``delayed`` (score run_at), ``ready`` (score priority then run_at) and
``leased`` (score lease expiry). Scripts live in ``lua/`` next to this file, each opening
with its KEYS/ARGV; redis-py's ``register_script`` loads each once and uses EVALSHA with
a NOSCRIPT fallback. Redis errors are translated to BrokerUnavailable at this boundary.
"""

import functools
import itertools
from collections import defaultdict
from pathlib import Path

import redis
from django.conf import settings

from jobs import conf
from jobs.exceptions import BrokerUnavailable
from runs.brokers.base import Broker
from runs.brokers.keys import Keys
from runs.clock import to_ms
from runs.models import DELAYED_STATES, Run, RunState
from runs.types import Lease, QueueDepth, RunRef, Slot

LUA_DIR = Path(__file__).parent / "lua"
SCRIPTS = ("push", "promote", "lease", "heartbeat", "reap")
PUSH_CHUNK = 1000


def translate_errors(method):
    """Re-raise redis connection errors as BrokerUnavailable (STYLE.md #8)."""

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise BrokerUnavailable(f"Redis is unreachable: {exc}") from exc

    return wrapper


@functools.cache
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5,
                                health_check_interval=30)


class RedisBroker(Broker):
    """The production broker. ``url`` defaults to settings.REDIS_URL."""

    name = "redis"

    def __init__(self, using: str = "default", url: str | None = None):
        super().__init__(using)
        self.url = url or settings.REDIS_URL or "redis://127.0.0.1:6379/0"
        self.client = _client(self.url)
        self.keys = Keys(conf.get("REDIS_PREFIX"))
        self.scripts = {
            name: self.client.register_script((LUA_DIR / f"{name}.lua").read_text())
            for name in SCRIPTS
        }
        self._rotation = itertools.count()

    def _queue_shards(self) -> list[tuple[str, int]]:
        members = self.client.smembers(self.keys.queues)
        pairs = []
        for member in members:
            queue, _, shard = member.decode().rpartition(":")
            pairs.append((queue, int(shard)))
        return sorted(pairs)

    @translate_errors
    def ping(self) -> None:
        self.client.ping()
        super().ping()

    @translate_errors
    def push(self, runs: list[RunRef]) -> None:
        by_shard: dict[tuple[str, int], list[RunRef]] = defaultdict(list)
        for ref in runs:
            by_shard[(ref.queue, ref.shard)].append(ref)
        pipe = self.client.pipeline(transaction=False)
        for (queue, shard), refs in by_shard.items():
            pipe.sadd(self.keys.queues, f"{queue}:{shard}")
            for start in range(0, len(refs), PUSH_CHUNK):
                args = []
                for ref in refs[start:start + PUSH_CHUNK]:
                    args += [ref.id, to_ms(ref.run_at), ref.priority]
                self.scripts["push"](
                    keys=self.keys.shard_keys(queue, shard), args=args, client=pipe
                )
        pipe.execute()

    @translate_errors
    def promote(self, limit: int | None = None) -> int:
        limit = limit or conf.get("PROMOTE_BATCH")
        moved: list[int] = []
        for queue, shard in self._queue_shards():
            ids = self.scripts["promote"](
                keys=[self.keys.delayed(queue, shard), self.keys.ready(queue, shard)],
                args=[limit],
            )
            moved += [int(i) for i in ids]
        if moved:
            # Only a label for people reading the runs table; the lease is fenced on state
            # anyway, so a worker that started the run first is never overwritten.
            Run.objects.using(self.using).filter(
                pk__in=moved, state__in=DELAYED_STATES
            ).update(state=RunState.QUEUED)
        return len(moved)

    @translate_errors
    def _claim(self, queues: list[str], n: int) -> list[Slot]:
        ttl_ms = int(conf.get("LEASE_TTL_S") * 1000)
        shards = conf.get("SHARDS")
        # Start at a different shard each call so shard 0 is not favoured.
        offset = next(self._rotation)
        claimed: list[Slot] = []
        for queue in queues:
            for i in range(shards):
                shard = (offset + i) % shards
                want = n - len(claimed)
                if want <= 0:
                    return claimed
                ids = self.scripts["lease"](
                    keys=[self.keys.ready(queue, shard), self.keys.leased(queue, shard)],
                    args=[want, ttl_ms],
                )
                claimed += [(int(i), queue, shard) for i in ids]
        return claimed

    @translate_errors
    def _forget(self, slots: list[Slot]) -> None:
        if not slots:
            return
        by_key = defaultdict(list)
        for run_id, queue, shard in slots:
            by_key[self.keys.leased(queue, shard)].append(run_id)
        pipe = self.client.pipeline(transaction=False)
        for key, ids in by_key.items():
            pipe.zrem(key, *ids)
        pipe.execute()

    @translate_errors
    def _extend(self, leases: list[Lease], ttl_s: float) -> None:
        by_key = defaultdict(list)
        for lease in leases:
            by_key[self.keys.leased(lease.queue, lease.shard)].append(lease.run_id)
        for key, ids in by_key.items():
            self.scripts["heartbeat"](keys=[key], args=[int(ttl_s * 1000), *ids])

    @translate_errors
    def _expired_claims(self, limit: int) -> list[int]:
        ids: list[int] = []
        for queue, shard in self._queue_shards():
            ids += [
                int(i)
                for i in self.scripts["reap"](keys=[self.keys.leased(queue, shard)], args=[limit])
            ]
        return ids

    @translate_errors
    def missing(self, slots: list[Slot]) -> list[int]:
        by_shard = defaultdict(list)
        for run_id, queue, shard in slots:
            by_shard[(queue, shard)].append(run_id)
        lacking: list[int] = []
        for (queue, shard), ids in by_shard.items():
            pipe = self.client.pipeline(transaction=False)
            for key in self.keys.shard_keys(queue, shard):
                pipe.zmscore(key, ids)
            delayed, ready, leased = pipe.execute()
            lacking += [
                run_id
                for run_id, d, r, le in zip(ids, delayed, ready, leased, strict=True)
                if d is None and r is None and le is None
            ]
        return lacking

    @translate_errors
    def needs_reconcile(self) -> bool:
        return not self.client.exists(self.keys.alive)

    @translate_errors
    def mark_reconciled(self) -> None:
        self.client.set(self.keys.alive, "1")

    @translate_errors
    def depth(self) -> list[QueueDepth]:
        totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        pairs = self._queue_shards()
        pipe = self.client.pipeline(transaction=False)
        for queue, shard in pairs:
            pipe.zcard(self.keys.ready(queue, shard))
            pipe.zcard(self.keys.delayed(queue, shard))
            pipe.zcard(self.keys.leased(queue, shard))
        counts = pipe.execute()
        for i, (queue, _shard) in enumerate(pairs):
            for j in range(3):
                totals[queue][j] += counts[3 * i + j]
        return [QueueDepth(q, *totals[q]) for q in sorted(totals)]

    @translate_errors
    def flush(self) -> None:
        """Delete every key of this broker (tests and ``manage.py`` resets only)."""
        keys = list(self.client.scan_iter(match=f"{self.keys.prefix}:*", count=1000))
        for start in range(0, len(keys), 1000):
            self.client.delete(*keys[start:start + 1000])



