"""Every Redis key the broker uses, built in one place (docs/architecture.md, "Conventions
in the code").

The keys of one queue shard share the hash tag ``{<queue>:<shard>}``, so they sit in one
slot; the limit keys share ``{limits}``, another slot, which is why Redis Cluster is not
supported (docs/architecture.md, "Brokers"; docs/isolation.md, "Redis Cluster").
"""

import zlib


def shard_of(shard_key: str, shards: int) -> int:
    """The shard (0 .. shards-1) of a run whose job has ``shard_key`` (the job's explicit
    ``shard_key``, else its handler name): CRC-32 of the UTF-8 key modulo ``shards``."""
    return zlib.crc32(shard_key.encode()) % max(shards, 1)


MEMBER_DIGITS = 19  # a bigint's digits


def member(run_id: int | str) -> str:
    """The member of run ``run_id`` in the waiting sets (delayed, ready, parked): its id
    zero-padded to MEMBER_DIGITS, so runs of equal score leave in id (creation) order, not
    in the lexicographic order of their ids (docs/architecture.md, "Brokers"). The leased
    set and the owners hash use the plain id. The Lua scripts pad the same way."""
    return str(run_id).zfill(MEMBER_DIGITS)


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

    def owners(self, queue: str, shard: int) -> str:
        """HASH run id -> owner id of the runs pushed to this shard (per-owner limits)."""
        return self._tagged(queue, shard, "owners")

    def fair(self, queue: str, shard: int) -> str:
        """HASH of the stride-scheduling state of the priority classes (lease.lua)."""
        return self._tagged(queue, shard, "fair")

    def parkedby(self, queue: str, shard: int) -> str:
        """SET of owners with runs parked in this shard because they were at their limit."""
        return self._tagged(queue, shard, "parkedby")

    def parked_prefix(self, queue: str, shard: int) -> str:
        """Prefix of ``parked:<owner>`` ZSETs (same hash tag, built inside the scripts)."""
        return self._tagged(queue, shard, "parked:")

    def shard_keys(self, queue: str, shard: int) -> list[str]:
        """``[delayed, ready, leased]`` of one queue shard."""
        return [self.delayed(queue, shard), self.ready(queue, shard), self.leased(queue, shard)]

    @property
    def queues(self) -> str:
        """SET of ``"<queue>:<shard>"`` members: every queue shard ever pushed to."""
        return f"{self.prefix}:queues"

    @property
    def running(self) -> str:
        """HASH ``o:<owner>`` / ``q:<queue>`` -> runs leased now, over all shards. The
        limit keys share the ``{limits}`` tag; on Redis Cluster they sit in another slot
        than a shard's keys, so limits need a single Redis (docs/scaling.md)."""
        return f"{self.prefix}:{{limits}}:running"

    @property
    def limits(self) -> str:
        """HASH ``o:<owner>`` -> that owner's concurrency limit (synced from OwnerPolicy)."""
        return f"{self.prefix}:{{limits}}:owners"

    def queue_fair(self, queue: str) -> str:
        """HASH of the stride state of ``queue``'s priority classes across its shards."""
        return f"{self.prefix}:{{limits}}:fair:{queue}"

    def bucket(self, queue: str) -> str:
        """HASH ``tokens``, ``ts`` (ms): the token bucket of ``queue``'s rate limit."""
        return f"{self.prefix}:{{limits}}:rate:{queue}"

    def alive(self, shard: int) -> str:
        """Written after each reconcile of ``shard``; its absence means Redis lost the
        shard's data (every dispatcher checks the marks of its own shards)."""
        return f"{self.prefix}:alive:{shard}"
