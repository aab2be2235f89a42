"""Every Redis key the broker uses, built in one place (STYLE.md #3).

The keys of one queue shard share the hash tag ``{<queue>:<shard>}`` so every Lua script
touches one slot and runs unchanged on Redis Cluster (DESIGN.md, "Redis layout").
"""

import zlib


def shard_of(shard_key: str, shards: int) -> int:
    """The shard (0 .. shards-1) of a run whose job has ``shard_key`` (its handler name)."""
    return zlib.crc32(shard_key.encode()) % max(shards, 1)


class Keys:
    """Key templates under ``prefix`` (default ``sched``)."""

    def __init__(self, prefix: str):
        self.prefix = prefix

    def _tagged(self, queue: str, shard: int, name: str) -> str:
        return f"{self.prefix}:{{{queue}:{shard}}}:{name}"

    def delayed(self, queue: str, shard: int) -> str:
        return self._tagged(queue, shard, "delayed")

    def ready(self, queue: str, shard: int) -> str:
        return self._tagged(queue, shard, "ready")

    def leased(self, queue: str, shard: int) -> str:
        return self._tagged(queue, shard, "leased")

    def shard_keys(self, queue: str, shard: int) -> list[str]:
        """``[delayed, ready, leased]`` of one queue shard."""
        return [self.delayed(queue, shard), self.ready(queue, shard), self.leased(queue, shard)]

    @property
    def queues(self) -> str:
        """SET of ``"<queue>:<shard>"`` members: every queue shard ever pushed to."""
        return f"{self.prefix}:queues"

    @property
    def alive(self) -> str:
        """Written after each reconcile; its absence means Redis lost its data."""
        return f"{self.prefix}:alive"
