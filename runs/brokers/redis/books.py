"""The Redis broker's bookkeeping of leases (a mixin of runs/brokers/redis/broker.py's
RedisBroker): forget finished runs, adopt the runs an ack's worker leased in the
database, extend or end leases. Each is one script call per queue shard, in the caller's
pipeline or one of its own; Redis errors become BrokerUnavailable (wire.py)."""

from collections import defaultdict

from runs.brokers.redis.wire import Pipe, translate_errors
from runs.types import Lease, Slot


class RedisBookkeeping:
    """A mixin of RedisBroker: ``keys``, ``_pipe``, ``_script`` and ``_unpark_into``
    are its."""

    @translate_errors
    def _forget(self, slots: list[Slot]) -> None:
        if not slots:
            return
        pipe = self._pipe()
        self._forget_into(pipe, slots)
        pipe.execute()

    def _forget_into(self, pipe: Pipe, slots: list[Slot]) -> None:
        by_shard = defaultdict(list)
        for run_id, queue, shard in slots:
            by_shard[(queue, shard)].append(run_id)
        for (queue, shard), ids in by_shard.items():
            pipe.script("forget", [self.keys.leased(queue, shard),
                                   self.keys.owners(queue, shard),
                                   self.keys.running(queue), self.keys.gates(queue, shard)],
                        [queue, *ids])
        # A finished run may make room for its owner's parked runs in this shard.
        self._unpark_into(pipe, list(by_shard))

    @translate_errors
    def _adopt(self, taken: list[tuple[Lease, int | None]], ttl_s: float) -> None:
        pipe = self._pipe()
        self._adopt_into(pipe, taken, ttl_s)
        pipe.execute()

    def _adopt_into(self, pipe: Pipe, taken: list[tuple[Lease, int | None]],
                    ttl_s: float) -> None:
        by_shard = defaultdict(list)
        for lease, owner in taken:
            by_shard[(lease.queue, lease.shard)] += [lease.run_id,
                                                     "" if owner is None else owner]
        ttl_ms = int(ttl_s * 1000)
        for (queue, shard), args in by_shard.items():
            # Known to the reap of lapsed claims (reap.lua reads the queues set).
            pipe.pipe.sadd(self.keys.queues, f"{queue}:{shard}")
            pipe.script("adopt", [self.keys.leased(queue, shard),
                                  self.keys.owners(queue, shard), self.keys.running(queue)],
                        [queue, ttl_ms, *args])

    @translate_errors
    def _extend(self, leases: list[Lease], ttl_s: float) -> None:
        by_key = defaultdict(list)
        for lease in leases:
            by_key[self.keys.leased(lease.queue, lease.shard)].append(lease.run_id)
        for key, ids in by_key.items():
            self._script("heartbeat", [key], [int(ttl_s * 1000), *ids])

    @translate_errors
    def _lapse(self, slots: list[Slot]) -> None:
        by_key = defaultdict(list)
        for run_id, queue, shard in slots:
            by_key[self.keys.leased(queue, shard)].append(run_id)
        for key, ids in by_key.items():
            self._script("heartbeat", [key], [0, *ids])  # expiry = now: reap takes them
