"""The queue shards the Redis broker knows of (docs/architecture.md, "Brokers"): every
``<queue>:<shard>`` ever pushed to (the queues set, keys.Keys.queues) and SHARDS. The
broker's promote and reap, and its parts' rounds over every shard (inspection.py,
limits.py), read them here."""

from runs.brokers.redis.keys import Keys
from runs.brokers.redis.wire import Wire
from scheduler_core import conf


class QueueShards:
    """The queue shards of one broker, read through ``wire`` from ``keys.queues``."""

    def __init__(self, wire: Wire, keys: Keys):
        self.wire = wire
        self.keys = keys

    def count(self) -> int:
        """SHARDS: how many shards each queue is split into (at least 1)."""
        return max(conf.get("SHARDS"), 1)

    def all(self) -> list[tuple[str, int]]:
        """Every ``(queue, shard)`` ever pushed to, sorted. Redis errors propagate (the
        caller translates them)."""
        members = self.wire.client.smembers(self.keys.queues)
        pairs = []
        for name in members:
            queue, _, shard = name.decode().rpartition(":")
            pairs.append((queue, int(shard)))
        return sorted(pairs)

    def owns(self, shards: list[int] | None, shard: int) -> bool:
        """Whether ``shard`` is among ``shards`` (None: all), by its number modulo SHARDS,
        so a shard left over from a larger SHARDS still has a dispatcher."""
        return shards is None or shard % self.count() in shards
