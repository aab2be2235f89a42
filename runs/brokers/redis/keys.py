"""Every Redis key the broker uses, built in one place (docs/architecture.md, "Brokers";
docs/isolation.md, "Redis Cluster").

Three layouts, one set of scripts. On a single Redis the keys of one queue shard share
the hash tag ``{<queue>:<shard>}`` and the limit keys are global (``{limits}``), so an
owner's limit counts its runs in every queue. On a Redis Cluster every key a script
touches must sit in one slot, so all keys of a queue (its shards and its limit keys) share
the tag ``{<queue>}``, as BullMQ does, and limits are kept per queue. A queue named in
SPREAD_QUEUES (a cluster only) is spread: each shard's keys, its limit keys included,
carry ``{<queue>:<shard>}``, so its shards sit in different slots and limits are kept per
shard (docs/isolation.md, "One queue over several masters"). Lua scripts never build key
names: every key they touch comes in KEYS, from here.
"""

MEMBER_DIGITS = 19  # a bigint's digits


def member(run_id: int | str) -> str:
    """The member of run ``run_id`` in the waiting sets (delayed, ready): its id
    zero-padded to MEMBER_DIGITS, so runs of equal score leave in id (creation) order, not
    in the lexicographic order of their ids (docs/architecture.md, "Brokers"). The leased
    set and the owners hash use the plain id. The Lua scripts pad the same way."""
    return str(run_id).zfill(MEMBER_DIGITS)


class Keys:
    """Key templates under ``prefix`` (default ``sched``); ``cluster``: the Redis Cluster
    layout (every key of a queue in the queue's slot) instead of the single-Redis one;
    ``spread``: on a cluster, the queues whose shards each get a slot of their own (a
    frozenset of names, or None for every queue; policy.spread_queues)."""

    def __init__(self, prefix: str, cluster: bool = False,
                 spread: frozenset[str] | None = frozenset()):
        self.prefix = prefix
        self.cluster = cluster
        self.spread = spread

    def spread_out(self, queue: str) -> bool:
        """Whether ``queue``'s shards sit in slots of their own, with per-shard limit keys
        (a cluster and a queue SPREAD_QUEUES names; never on a single Redis)."""
        return self.cluster and (self.spread is None or queue in self.spread)

    def _tagged(self, queue: str, shard: int, name: str) -> str:
        if self.cluster and not self.spread_out(queue):
            return f"{self.prefix}:{{{queue}}}:{shard}:{name}"
        return f"{self.prefix}:{{{queue}:{shard}}}:{name}"

    def _limit(self, queue: str, shard: int, name: str) -> str:
        if not self.cluster:
            return f"{self.prefix}:{{limits}}:{name}"
        if self.spread_out(queue):
            return f"{self.prefix}:{{{queue}:{shard}}}:{name}"
        return f"{self.prefix}:{{{queue}}}:{name}"

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

    def parked(self, queue: str, shard: int) -> str:
        """ZSET of the runs parked in this shard, all of score 0, member
        ``<owner>|<ready score, 16 digits>|<padded id>``: an owner's runs are one
        lexicographic range, in their ready order (ZRANGEBYLEX, unpark.lua)."""
        return self._tagged(queue, shard, "parked")

    def parkedrun(self, queue: str, shard: int) -> str:
        """HASH run id -> its member in ``parked`` (push.lua takes a parked run back)."""
        return self._tagged(queue, shard, "parkedrun")

    def gates(self, queue: str, shard: int) -> str:
        """HASH run id -> its gate entry (handler, rate key, concurrency key, limit:
        runs/flow/control.py) for the runs pushed to this shard while flow control is in use."""
        return self._tagged(queue, shard, "gates")

    def shard_keys(self, queue: str, shard: int) -> list[str]:
        """``[delayed, ready, leased]`` of one queue shard."""
        return [self.delayed(queue, shard), self.ready(queue, shard), self.leased(queue, shard)]

    def wake(self, queue: str) -> str:
        """LIST of wake-up tokens of ``queue``: each push of runs ready now adds some (at
        most WAKE_TOKENS, wake.py), and an idle worker blocks on its queues'
        lists (BLPOP) rather than sleeping out WORKER_POLL_S. One hash tag for every
        queue, so a worker's BLPOP over several queues names keys of one slot on a
        cluster too; a token is a hint, never a run: losing one costs at most a poll."""
        return f"{self.prefix}:{{wake}}:{queue}"

    @property
    def queues(self) -> str:
        """SET of ``"<queue>:<shard>"`` members: every queue shard ever pushed to."""
        return f"{self.prefix}:queues"

    def running(self, queue: str, shard: int = 0) -> str:
        """HASH ``o:<owner>`` / ``c:<key>`` / ``q:<queue>`` -> runs leased now: over every
        queue on a single Redis, over ``queue``'s shards on a cluster, over shard ``shard``
        alone for a spread queue (docs/isolation.md). ``shard`` counts only there."""
        return self._limit(queue, shard, "running")

    def limits(self, queue: str = "", shard: int = 0) -> str:
        """HASH ``o:<owner>`` -> that owner's concurrency limit (synced from OwnerPolicy),
        and the handler and key rate limits: one on a single Redis, a copy in each queue's
        slot on a cluster, in each shard's for a spread queue. ``queue`` "" on a cluster:
        the untagged master copy new queues and shards are filled from."""
        if self.cluster and not queue:
            return f"{self.prefix}:limits"
        return self._limit(queue, shard, "owners")

    def queue_fair(self, queue: str) -> str:
        """HASH of the stride state of ``queue``'s priority classes across its shards
        (read and written by plain commands, never by a script: in the queue's slot on a
        cluster, spread or not)."""
        if self.cluster:
            return f"{self.prefix}:{{{queue}}}:fair:{queue}"
        return self._limit(queue, 0, f"fair:{queue}")

    def bucket(self, queue: str, shard: int = 0) -> str:
        """HASH ``tokens``, ``ts`` (ms): the token bucket of ``queue``'s rate limit (of
        shard ``shard``'s share of it for a spread queue)."""
        return self._limit(queue, shard, f"rate:{queue}")

    def buckets(self, queue: str, shard: int = 0) -> str:
        """HASH ``h:<handler>`` / ``k:<rate key>`` -> ``"<tokens> <ms>"``: the token
        buckets of the handler and key rate limits (global on a single Redis, per queue
        on a cluster, per shard for a spread queue)."""
        return self._limit(queue, shard, "buckets")

    def alive(self, shard: int) -> str:
        """Written after each reconcile of ``shard``; its absence means Redis lost the
        shard's data (every dispatcher checks the marks of its own shards)."""
        return f"{self.prefix}:alive:{shard}"
