"""The Redis broker's owner-limit bookkeeping: parked runs back to ready, the owner limits
synced from the database, the running counts (docs/isolation.md, "Concurrency limits",
"Redis Cluster" and "One queue over several masters"). RedisBroker's unpark, sync_limits
and running_counts delegate here.
"""

from collections import defaultdict

from runs.brokers.redis.keys import Keys
from runs.brokers.redis.queues import QueueShards
from runs.brokers.redis.wire import Pipe, Wire, translate_errors
from runs.flow import control as flow
from scheduler_core import conf

UNPARK_CAP = 1000  # most parked runs of one owner moved back per shard and call


class Limits:
    """Owner limits on Redis: one set of hashes on a single Redis, a copy per queue on a
    cluster, per shard for a spread queue (``keys.Keys``), over ``wire`` and the broker's
    ``shards``; ``using``: the database alias whose flow limits are synced
    (runs/flow/control.py)."""

    def __init__(self, wire: Wire, keys: Keys, shards: QueueShards, using: str):
        self.wire = wire
        self.keys = keys
        self.shards = shards
        self.using = using
        self._limited: set[str] = set()  # cluster: the limits hashes known filled

    def unpark_into(self, pipe: Pipe, pairs: list[tuple[str, int]]) -> None:
        """Queue in ``pipe`` the unpark script of each ``(queue, shard)`` of ``pairs``."""
        owner_default = conf.get("OWNER_CONCURRENCY")
        for queue, shard in pairs:
            pipe.script("unpark", [self.keys.ready(queue, shard),
                                   self.keys.parkedby(queue, shard),
                                   self.keys.running(queue, shard),
                                   self.keys.limits(queue, shard),
                                   self.keys.parked(queue, shard),
                                   self.keys.parkedrun(queue, shard),
                                   self.keys.gates(queue, shard)],
                        [owner_default, UNPARK_CAP])

    @translate_errors
    def unpark(self, shards: list[int] | None = None) -> int:
        """Move parked runs of owners that have room again back to ready, in ``shards``
        (default: all). The dispatcher calls this every round for its shards, so a raised
        or removed limit takes effect within a round. Returns how many moved."""
        pairs = [(q, s) for q, s in self.shards.all() if self.shards.owns(shards, s)]
        if not pairs:
            return 0
        pipe = self.wire.pipe()
        self.unpark_into(pipe, pairs)
        return sum(int(m) for m in pipe.execute())

    @translate_errors
    def sync(self, limits: dict[int, int]) -> None:
        """Replace the per-owner limits Redis enforces with ``limits`` (owner id ->
        most running runs, positive) and the handler and key rate limits (runs/flow/control.py,
        read now), atomically per hash: the one hash on a single Redis; on a cluster the
        master copy and each known queue's copy (each known shard's, spread)."""
        flow.forget_cache(self.using)
        args = [x for owner, n in limits.items() for x in (f"o:{owner}", n)]
        args += [x for field, value in flow.redis_fields(self.using).items()
                 for x in (field, value)]
        hashes = {self.keys.limits("")}
        if self.keys.cluster:
            hashes |= {self.keys.limits(queue, shard) for queue, shard in self.shards.all()}
        pipe = self.wire.pipe()
        for key in sorted(hashes):
            pipe.script("limits", [key], args)
        pipe.execute()

    def for_new_queues(self, pairs: set[tuple[str, int]]) -> None:
        """Cluster: give the limits hash of each ``(queue, shard)`` of ``pairs`` (the
        queue's, or the shard's for a spread queue) that no pair in the queues set shares
        a copy of the master limits before its first push, so its first leases see the
        owners' limits (dispatchers' reconciles and policy changes sync every known one)."""
        wanted = {self.keys.limits(queue, shard) for queue, shard in pairs}
        if wanted <= self._limited:
            return
        known = {self.keys.limits(queue, shard) for queue, shard in self.shards.all()}
        self._limited |= known
        new = sorted(wanted - known)
        if not new:
            return
        master = self.wire.client.hgetall(self.keys.limits(""))
        args = [x for field, n in master.items() for x in (field, n)]
        pipe = self.wire.pipe()
        for key in new:
            pipe.script("limits", [key], args)
        pipe.execute()
        self._limited |= set(new)

    @translate_errors
    def running_counts(self) -> dict[str, int]:
        """Runs leased now: ``{"o:<owner>": n, "q:<queue>": n}``, each owner's summed
        over its queues on a cluster (and a spread queue's shards)."""
        names = ({self.keys.running(queue, shard) for queue, shard in self.shards.all()}
                 if self.keys.cluster else {self.keys.running("")})
        pipe = self.wire.client.pipeline(transaction=False)
        for key in sorted(names):
            pipe.hgetall(key)
        counts: dict[str, int] = defaultdict(int)
        for reply in pipe.execute():
            for field, value in reply.items():
                counts[field.decode()] += int(value)
        return dict(counts)
