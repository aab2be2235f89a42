"""The Redis broker's bookkeeping of leases: forget finished runs, adopt the runs an ack's
worker leased in the database, extend or end leases. Each is one script call per queue
shard, in the caller's pipeline or one of its own; Redis errors become BrokerUnavailable
(wire.py). RedisBroker binds its _forget, _adopt, _extend and _lapse to these."""

from collections import defaultdict
from collections.abc import Callable

from runs.brokers.redis.keys import Keys
from runs.brokers.redis.wire import Pipe, Wire, translate_errors
from runs.types import Lease, Slot


class LeaseBooks:
    """The leased sets of one broker, over ``wire`` and ``keys``; ``unpark_into``
    (limits.Limits.unpark_into) queues the unpark of shards where runs finished."""

    def __init__(self, wire: Wire, keys: Keys,
                 unpark_into: Callable[[Pipe, list[tuple[str, int]]], None]):
        self.wire = wire
        self.keys = keys
        self._unpark_into = unpark_into

    @translate_errors
    def forget(self, slots: list[Slot]) -> None:
        """As Broker._forget: drop ``slots`` from their leased sets, one pipeline."""
        if not slots:
            return
        pipe = self.wire.pipe()
        self.forget_into(pipe, slots)
        pipe.execute()

    def forget_into(self, pipe: Pipe, slots: list[Slot]) -> None:
        """Queue in ``pipe`` the forget of ``slots`` and the unpark of their shards."""
        by_shard = defaultdict(list)
        for run_id, queue, shard in slots:
            by_shard[(queue, shard)].append(run_id)
        for (queue, shard), ids in by_shard.items():
            pipe.script("forget", [self.keys.leased(queue, shard),
                                   self.keys.owners(queue, shard),
                                   self.keys.running(queue, shard),
                                   self.keys.gates(queue, shard)],
                        [queue, *ids])
        # A finished run may make room for its owner's parked runs in this shard.
        self._unpark_into(pipe, list(by_shard))

    @translate_errors
    def adopt(self, taken: list[tuple[Lease, int | None]], ttl_s: float) -> None:
        """As Broker._adopt: record ``taken`` as leased for ``ttl_s`` seconds."""
        pipe = self.wire.pipe()
        self.adopt_into(pipe, taken, ttl_s)
        pipe.execute()

    def adopt_into(self, pipe: Pipe, taken: list[tuple[Lease, int | None]],
                   ttl_s: float) -> None:
        """Queue in ``pipe`` the adopt of ``taken`` (lease, owner id or None)."""
        by_shard = defaultdict(list)
        for lease, owner in taken:
            by_shard[(lease.queue, lease.shard)] += [lease.run_id,
                                                     "" if owner is None else owner]
        ttl_ms = int(ttl_s * 1000)
        for (queue, shard), args in by_shard.items():
            # Known to the reap of lapsed claims (reap.lua reads the queues set).
            pipe.pipe.sadd(self.keys.queues, f"{queue}:{shard}")
            pipe.script("adopt", [self.keys.leased(queue, shard),
                                  self.keys.owners(queue, shard),
                                  self.keys.running(queue, shard)],
                        [queue, ttl_ms, *args])

    @translate_errors
    def extend(self, leases: list[Lease], ttl_s: float) -> None:
        """As Broker._extend: push the expiry of ``leases`` ``ttl_s`` seconds out."""
        by_key = defaultdict(list)
        for lease in leases:
            by_key[self.keys.leased(lease.queue, lease.shard)].append(lease.run_id)
        for key, ids in by_key.items():
            self.wire.script("heartbeat", [key], [int(ttl_s * 1000), *ids])

    @translate_errors
    def lapse(self, slots: list[Slot]) -> None:
        """As Broker._lapse: make the claims on ``slots`` expire now."""
        by_key = defaultdict(list)
        for run_id, queue, shard in slots:
            by_key[self.keys.leased(queue, shard)].append(run_id)
        for key, ids in by_key.items():
            self.wire.script("heartbeat", [key], [0, *ids])  # expiry = now: reap takes them
