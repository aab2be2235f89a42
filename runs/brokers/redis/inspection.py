"""What the Redis broker reports about its working set, for the dispatcher's reconcile and
for operators: which runs it lacks, whether a shard lost its data, queue depths
(docs/architecture.md, "Brokers"). RedisBroker's Broker verbs of the same names delegate
here.
"""

from collections import defaultdict

from runs.brokers.redis.keys import Keys, member
from runs.brokers.redis.queues import QueueShards
from runs.brokers.redis.wire import Wire, translate_errors
from runs.types import QueueDepth, Slot


class Inspector:
    """missing, needs_reconcile and mark_reconciled (the reconcile's questions), depth and
    shard_depth (the queues' sizes), flush (tests and resets), over ``wire``, ``keys``
    and the broker's ``shards``. Redis errors raise BrokerUnavailable."""

    def __init__(self, wire: Wire, keys: Keys, shards: QueueShards):
        self.wire = wire
        self.keys = keys
        self.shards = shards

    @translate_errors
    def missing(self, slots: list[Slot]) -> list[int]:
        """As Broker.missing: the ids of ``slots`` in none of their shard's sets."""
        by_shard = defaultdict(list)
        for run_id, queue, shard in slots:
            by_shard[(queue, shard)].append(run_id)
        lacking: list[int] = []
        for (queue, shard), ids in by_shard.items():
            pipe = self.wire.client.pipeline(transaction=False)
            members = [member(run_id) for run_id in ids]
            pipe.zmscore(self.keys.delayed(queue, shard), members)
            pipe.zmscore(self.keys.ready(queue, shard), members)
            pipe.zmscore(self.keys.leased(queue, shard), ids)
            pipe.hmget(self.keys.parkedrun(queue, shard), ids)
            delayed, ready, leased, parked = pipe.execute()
            # A run set aside for its owner's limit is in parked (and parkedrun).
            lacking += [
                run_id
                for run_id, d, r, le, p in zip(ids, delayed, ready, leased, parked, strict=True)
                if d is None and r is None and le is None and p is None
            ]
        return lacking

    def _alive_keys(self, shards: list[int] | None) -> list[str]:
        numbers = range(self.shards.count()) if shards is None else shards
        return [self.keys.alive(shard) for shard in numbers]

    @translate_errors
    def needs_reconcile(self, shards: list[int] | None = None) -> bool:
        """As Broker.needs_reconcile: an alive mark of ``shards`` is gone."""
        keys = self._alive_keys(shards)
        return self.wire.client.exists(*keys) < len(keys)

    @translate_errors
    def mark_reconciled(self, shards: list[int] | None = None) -> None:
        """As Broker.mark_reconciled: set the alive marks of ``shards``."""
        pipe = self.wire.client.pipeline(transaction=False)  # one SET each: they span slots
        for key in self._alive_keys(shards):
            pipe.set(key, "1")
        pipe.execute()

    @translate_errors
    def depth(self) -> list[QueueDepth]:
        """As Broker.depth: shard_depth summed per queue."""
        totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        for queue, _shard, ready, delayed, leased in self.shard_depth():
            for j, count in enumerate((ready, delayed, leased)):
                totals[queue][j] += count
        return [QueueDepth(q, *totals[q]) for q in sorted(totals)]

    @translate_errors
    def shard_depth(self) -> list[tuple[str, int, int, int, int]]:
        """``(queue, shard, ready, delayed, leased)`` per queue shard; ready counts runs
        parked for their owner's limit too (they are due, only held back)."""
        pairs = self.shards.all()
        pipe = self.wire.client.pipeline(transaction=False)
        for queue, shard in pairs:
            pipe.zcard(self.keys.ready(queue, shard))
            pipe.zcard(self.keys.delayed(queue, shard))
            pipe.zcard(self.keys.leased(queue, shard))
            pipe.zcard(self.keys.parked(queue, shard))
        counts = pipe.execute()
        return [(queue, shard, counts[4 * i] + counts[4 * i + 3], counts[4 * i + 1],
                 counts[4 * i + 2]) for i, (queue, shard) in enumerate(pairs)]

    @translate_errors
    def flush(self) -> None:
        """Delete every key of this broker (tests and ``manage.py`` resets only)."""
        client = self.wire.client
        keys = list(client.scan_iter(match=f"{self.keys.prefix}:*", count=1000))
        for start in range(0, len(keys), 1000):
            client.delete(*keys[start:start + 1000])  # split by slot on a cluster
