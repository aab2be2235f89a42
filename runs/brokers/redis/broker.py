"""The Redis broker: sorted sets and Lua scripts (docs/architecture.md, "Brokers").

Per queue shard: ``delayed`` (score run_at), ``ready`` (score priority then run_at; equal
scores leave in id order, the members being zero-padded ids, keys.member) and ``leased``
(score lease expiry). Scripts live in ``lua/`` next to this file, each opening with its
KEYS/ARGV, and run by EVALSHA through wire.py (which translates Redis errors to
BrokerUnavailable). RedisBroker pushes, promotes, leases and reaps itself, and composes
the parts that own the rest: the wake lists (wake.py), the reports on the working set
(inspection.py), owner limits (limits.py) and lease bookkeeping (books.py).
"""

import itertools
import time
from collections import defaultdict
from pathlib import Path

from django.conf import settings

from runs.brokers.base import Broker
from runs.brokers.redis.books import LeaseBooks
from runs.brokers.redis.inspection import Inspector
from runs.brokers.redis.keys import Keys
from runs.brokers.redis.limits import Limits
from runs.brokers.redis.queues import QueueShards
from runs.brokers.redis.spread import claim_spread
from runs.brokers.redis.wake import WAIT_SLACK_S, WakeLists
from runs.brokers.redis.wire import (
    UNAVAILABLE,
    Pipe,
    Wire,
    is_cluster_url,
    redis_client,
    translate_errors,
)
from runs.clock import to_ms
from runs.execution.leases import EARLY_MAX_S
from runs.flow import control as flow
from runs.models import DELAYED_STATES, Run, RunState
from runs.tenancy import policy
from runs.types import Lease, QueueDepth, RunRef, Slot
from scheduler_core import conf

LUA_DIR = Path(__file__).parent / "lua"
SCRIPTS = ("push", "promote", "lease", "heartbeat", "reap", "forget", "unpark", "limits",
           "adopt")
PUSH_CHUNK = 1000
PROMOTE_IN_LEASE = 1000  # most due runs a lease promotes per shard (as lease.lua does)
# How long the ready sets' heads read with an ack's bookkeeping serve the next acks'
# continuations (most_urgent_ready) before they are read again, in seconds.
HEADS_FRESH_S = 0.05


class RedisBroker(Broker):
    """The production broker. ``url`` defaults to settings.REDIS_URL."""

    name = "redis"
    claims_in_database = False
    wait_slack_s = WAIT_SLACK_S

    def __init__(self, using: str = "default", url: str | None = None):
        super().__init__(using)
        self.url = url or getattr(settings, "REDIS_URL", None) or "redis://127.0.0.1:6379/0"
        self.keys = Keys(conf.get("REDIS_PREFIX"), cluster=is_cluster_url(self.url),
                         spread=policy.spread_queues())
        self.sources = {name: (LUA_DIR / f"{name}.lua").read_text() for name in SCRIPTS}
        self.wire = Wire(self.url, self.sources)
        self.shards = QueueShards(self.wire, self.keys)
        self.wake = WakeLists(self.wire, self.keys)
        self.inspector = Inspector(self.wire, self.keys, self.shards)
        self.limits = Limits(self.wire, self.keys, self.shards, using)
        self.books = LeaseBooks(self.wire, self.keys, self.limits.unpark_into)
        # The Broker verbs a part answers are that part's bound methods, set on the
        # instance (shadowing Broker's defaults) rather than methods that delegate: no
        # call layer is added where a worker calls per run or per idle wait (an ack's
        # _forget/_adopt/_settle_now, a heartbeat's _extend, wait_ready,
        # the lease's shard_count), and the cold verbs are bound the same way for one
        # rule. Only depth, abstract in Broker, delegates in a method.
        self._pipe, self._script = self.wire.pipe, self.wire.script
        self.shard_count, self._queue_shards = self.shards.count, self.shards.all
        self.wait_ready = self.wake.wait
        self._forget, self._forget_into = self.books.forget, self.books.forget_into
        self._adopt, self._adopt_into = self.books.adopt, self.books.adopt_into
        self._extend, self._lapse = self.books.extend, self.books.lapse
        self.missing, self.shard_depth = self.inspector.missing, self.inspector.shard_depth
        self.needs_reconcile = self.inspector.needs_reconcile
        self.mark_reconciled = self.inspector.mark_reconciled
        self.flush = self.inspector.flush  # tests and resets: every key of this broker
        self.unpark, self.sync_limits = self.limits.unpark, self.limits.sync
        self.running_counts = self.limits.running_counts
        self._rotation = itertools.count()
        self._known: list[tuple[str, int]] = []
        self._known_at = float("-inf")
        # (monotonic time read, queues, {queue: most urgent waiting priority}) or None
        self._heads: tuple[float, tuple[str, ...], dict[str, int]] | None = None

    @property
    def client(self):
        """The client of ``url``, made at first use (wire.redis_client)."""
        return redis_client(self.url)

    def depth(self) -> list[QueueDepth]:
        """As Inspector.depth: ready, delayed and leased counts per queue."""
        return self.inspector.depth()

    @translate_errors
    def ping(self) -> None:
        self.client.ping()
        super().ping()

    @translate_errors
    def push(self, runs: list[RunRef]) -> None:
        by_shard: dict[tuple[str, int], list[RunRef]] = defaultdict(list)
        for ref in runs:
            by_shard[(ref.queue, ref.shard)].append(ref)
        if self.keys.cluster:
            self.limits.for_new_queues(set(by_shard))
        gates = flow.gates_of(runs, self.using)
        pipe = self._pipe()
        for (queue, shard), refs in by_shard.items():
            pipe.command("SADD", self.keys.queues, f"{queue}:{shard}")
            keys = [*self.keys.shard_keys(queue, shard), self.keys.owners(queue, shard),
                    self.keys.running(queue, shard), self.keys.parked(queue, shard),
                    self.keys.parkedrun(queue, shard), self.keys.gates(queue, shard)]
            for start in range(0, len(refs), PUSH_CHUNK):
                args = [queue]
                for ref in refs[start:start + PUSH_CHUNK]:
                    args += [ref.id, to_ms(ref.run_at), ref.priority,
                             "" if ref.owner is None else ref.owner, gates.get(ref.id, "")]
                pipe.script("push", keys, args)
        unsent = self.wake.into(pipe, runs)
        pipe.execute()
        self.wake.send(unsent)

    @translate_errors
    def promote(self, limit: int | None = None, shards: list[int] | None = None,
                queues: list[str] | None = None, within_s: float = 0.0) -> int:
        limit = limit or conf.get("PROMOTE_BATCH")
        moved: list[int] = []
        places = (self._queue_shards() if queues is None
                  else [(q, s) for q in queues for s in self._known_shards(q)])
        for queue, shard in places:
            if not self.shards.owns(shards, shard):
                continue
            ids = self._script(
                "promote", [self.keys.delayed(queue, shard), self.keys.ready(queue, shard)],
                [limit, int(min(within_s, EARLY_MAX_S) * 1000)])
            moved += [int(i) for i in ids]
        if moved:
            # Only a label for people reading the runs table; the lease is fenced on state
            # anyway, so a worker that started the run first is never overwritten.
            Run.objects.using(self.using).filter(pk__in=moved, state__in=DELAYED_STATES) \
                .update(state=RunState.QUEUED)
        return len(moved)

    @translate_errors
    def _claim(self, queues: list[str], n: int) -> list[Slot]:
        claimed = self._claim_from(queues, n)
        if not claimed and time.monotonic() - self._known_at > 0.1:
            # Nothing found: look again with the shard list re-read, in case runs sit in a
            # shard this worker did not know of yet.
            self._known_at = float("-inf")
            claimed = self._claim_from(queues, n)
        return claimed

    def _claim_from(self, queues: list[str], n: int) -> list[Slot]:
        """Claim up to ``n`` runs from ``queues`` in order. A queue whose master cannot be
        reached is passed over, so on a cluster a failover holds up only the lost
        master's queues (it held up every queue of the worker for the whole failover);
        its error is raised only when no queue could be reached."""
        claimed: list[Slot] = []
        failure, reached = None, False
        for queue in queues:
            want = n - len(claimed)
            if want <= 0:
                break
            try:
                shards = self._shards_of(queue)
                if len(shards) == 1:
                    [ids] = self._lease_calls(queue, [(shards[0], want, policy.classes())])
                    claimed += [(i, queue, shards[0]) for i in ids]
                elif self.keys.spread_out(queue):  # its shards on several masters
                    claimed += claim_spread(self, queue, shards, want)
                else:
                    claimed += self._claim_across(queue, shards, want)
                reached = True
            except UNAVAILABLE as exc:
                failure = failure or exc
        if failure is not None and not reached:
            raise failure
        return claimed

    def _shards_of(self, queue: str) -> list[int]:
        """The shards of ``queue`` to lease from, starting at a different one each call so
        no shard, shard 0 included, is favoured (``_known_shards``, rotated)."""
        shards = self._known_shards(queue)
        offset = next(self._rotation) % len(shards)
        return shards[offset:] + shards[:offset]

    def _known_shards(self, queue: str) -> list[int]:
        """The shards of ``queue`` in order: the configured ones, plus any a larger SHARDS
        left runs in (known from the queues set, re-read at most once a second, or at once
        when a lease finds nothing)."""
        now = time.monotonic()
        if now - self._known_at > 1.0:
            try:
                self._known = self._queue_shards()
            except UNAVAILABLE:  # its master is down: the shards known so far serve
                pass
            self._known_at = now
        count = self.shard_count()
        return sorted(set(range(count)) | {s for q, s in self._known if q == queue})

    def _claim_across(self, queue: str, shards: list[int], n: int) -> list[Slot]:
        """Lease ``n`` runs of a queue split into several shards with the priority classes'
        shares kept for the queue as a whole: count each class's ready runs in every shard
        (after promoting what fell due), plan the classes by stride scheduling over the
        queue-wide state (``runs/tenancy/policy.py``), then take each class's share from the shards
        that hold it, one run per shard in turn. Workers racing on the shared state only
        blur the shares for a moment; leases stay exactly-once (each is one Lua call)."""
        classes = policy.classes()
        pipe = self._pipe()
        for shard in shards:
            pipe.script("promote", [self.keys.delayed(queue, shard),
                                    self.keys.ready(queue, shard)], [PROMOTE_IN_LEASE])
            for c in classes:
                pipe.pipe.zcount(self.keys.ready(queue, shard), c.lo * policy.PRIORITY_SPAN,
                                 f"({(c.hi + 1) * policy.PRIORITY_SPAN}")
        fair = self.keys.queue_fair(queue)
        pipe.pipe.hmget(fair, [f"p{i}" for i in range(len(classes))] + ["vt"])
        replies = pipe.execute()
        state = replies[-1]
        counts = [[int(replies[i * (len(classes) + 1) + 1 + c]) for c in range(len(classes))]
                  for i in range(len(shards))]
        available = [sum(row[c] for row in counts) for c in range(len(classes))]
        if not any(available):
            return []
        passes = [float(state[i]) if state[i] is not None else c.stride
                  for i, c in enumerate(classes)]
        vt = float(state[-1]) if state[-1] is not None else 0.0
        takes, new_passes, new_vt = policy.stride_plan(classes, passes, vt, available, n)
        calls: dict[tuple[int, int], int] = {}
        for c, take in enumerate(takes):
            left = [row[c] for row in counts]
            while take > 0:
                for i, shard in enumerate(shards):
                    if take and left[i]:
                        calls[(shard, c)] = calls.get((shard, c), 0) + 1
                        left[i] -= 1
                        take -= 1
        planned = list(calls.items())
        results = self._lease_calls(
            queue, [(shard, k, (classes[c],)) for (shard, c), k in planned])
        claimed: list[Slot] = []
        got = [0] * len(classes)
        for ((shard, c), _k), ids in zip(planned, results, strict=True):
            claimed += [(i, queue, shard) for i in ids]
            got[c] += len(ids)
        # Charge each class only for what it got (limits may have held some back).
        for c, cls in enumerate(classes):
            new_passes[c] -= (takes[c] - got[c]) * cls.stride
        self.client.hset(fair, mapping={**{f"p{i}": p for i, p in enumerate(new_passes)},
                                        "vt": new_vt})
        return claimed

    @translate_errors
    def next_due_s(self, queues: list[str]) -> float | None:
        pipe = self.client.pipeline(transaction=False)
        for queue in queues:
            for shard in self._shards_of(queue):
                pipe.zrange(self.keys.delayed(queue, shard), 0, 0, withscores=True)
        try:
            heads = [score for reply in pipe.execute() for _, score in reply]
        except UNAVAILABLE:  # a master of some queue is down: unknown, poll
            return None
        if not heads:
            return None
        run_at_ms = min(heads) // 10  # score: run_at_ms * 10 + priority
        return max(run_at_ms / 1000 - time.time(), 0.0)

    @translate_errors
    def most_urgent_ready(self, queues: list[str]) -> dict[str, int]:
        """As Broker.most_urgent_ready, from the heads read with the last ack's
        bookkeeping (_settle_now, the same pipeline as its forget and adopt) when they are
        of the same queues and at most HEADS_FRESH_S old, else read now. A read of its own
        before each ack cost a chain about 2 ms a handoff in the worker, ten times the
        round trip (BENCHMARKS.md, "Workflows (W7)")."""
        key = tuple(queues)
        cached = self._heads
        if (cached is not None and cached[1] == key
                and time.monotonic() - cached[0] <= HEADS_FRESH_S):
            return dict(cached[2])
        pipe = self._pipe()
        asked = self._heads_into(pipe, key)
        return self._heads_from(key, asked, pipe.execute(), time.monotonic())

    def _heads_into(self, pipe: Pipe, queues: tuple[str, ...]) -> list[str]:
        """Queue, for every shard of ``queues``, the promotion of its delayed runs that
        have fallen due (as lease.lua does before it leases: a due retry or delayed run
        is what a lease would take) and the read of its ready set's head (its score is
        priority * PRIORITY_SPAN + run_at_ms, runs/tenancy/policy.py): two replies a shard.
        Returns the queue of each shard, in order."""
        asked = []
        for queue in queues:
            # In order, not rotated: the leases' rotation must not advance with these.
            for shard in self._known_shards(queue):
                pipe.script("promote", [self.keys.delayed(queue, shard),
                                        self.keys.ready(queue, shard)], [PROMOTE_IN_LEASE])
                pipe.pipe.zrange(self.keys.ready(queue, shard), 0, 0, withscores=True)
                asked.append(queue)
        return asked

    def _heads_from(self, queues: tuple[str, ...], asked: list[str], replies: list,
                    read_at: float) -> dict[str, int]:
        found: dict[str, int] = {}
        for queue, reply in zip(asked, replies[1::2], strict=True):
            for _, score in reply:
                priority = int(score) // policy.PRIORITY_SPAN
                found[queue] = min(priority, found.get(queue, priority))
        self._heads = (read_at, queues, found)
        return dict(found)

    def _lease_calls(self, queue: str, calls) -> list[list[int]]:
        """Run the lease script once per ``(shard, n, classes)`` in one pipeline; returns
        the leased run ids of each call."""
        if not calls:
            return []
        ttl_ms = int(conf.get("LEASE_TTL_S") * 1000)
        owner_default = conf.get("OWNER_CONCURRENCY")
        park_budget = conf.get("FAIR_SCAN")
        limits = policy.queue_limits(queue)
        spread, count = self.keys.spread_out(queue), self.shard_count()
        pipe = self._pipe()
        for shard, n, classes in calls:
            share = limits.shard_share(shard, count) if spread else limits
            pipe.script(
                "lease",
                [self.keys.ready(queue, shard), self.keys.leased(queue, shard),
                 self.keys.owners(queue, shard), self.keys.fair(queue, shard),
                 self.keys.parkedby(queue, shard), self.keys.running(queue, shard),
                 self.keys.limits(queue, shard), self.keys.bucket(queue, shard),
                 self.keys.delayed(queue, shard), self.keys.parked(queue, shard),
                 self.keys.parkedrun(queue, shard), self.keys.gates(queue, shard),
                 self.keys.buckets(queue, shard)],
                [n, ttl_ms, queue, owner_default, share.max_running, share.rate,
                 share.burst, park_budget,
                 *[x for c in classes for x in (c.lo, c.hi, c.weight)]])
        return [[int(i) for i in ids] for ids in pipe.execute()]

    def _settle(self, finished: list[Slot], taken: list[tuple[Lease, int | None]],
                ttl_s: float) -> None:
        # One pipeline, one round trip: an ack of a chain's node paid two (BENCHMARKS.md,
        # "Workflows (W7)"). Its failure is _after_commit's: reap and reconcile repair it.
        if not finished and not taken:
            return
        self._after_commit(self._settle_now, finished, taken, ttl_s)

    @translate_errors
    def _settle_now(self, finished: list[Slot], taken: list[tuple[Lease, int | None]],
                    ttl_s: float) -> None:
        pipe = self._pipe()
        if finished:
            self._forget_into(pipe, finished)
        if taken:
            self._adopt_into(pipe, taken, ttl_s)
        cached = self._heads
        if cached is None:
            pipe.execute()
            return
        # The next ack's continuations compare with these (most_urgent_ready).
        read_at = time.monotonic()
        asked = self._heads_into(pipe, cached[1])
        replies = pipe.execute()
        self._heads_from(cached[1], asked, replies[len(replies) - 2 * len(asked):], read_at)

    @translate_errors
    def _expired_claims(self, limit: int, shards: list[int] | None = None) -> list[int]:
        ids: list[int] = []
        for queue, shard in self._queue_shards():
            if not self.shards.owns(shards, shard):
                continue
            keys = [self.keys.leased(queue, shard), self.keys.owners(queue, shard),
                    self.keys.running(queue, shard), self.keys.gates(queue, shard)]
            lapsed = [int(i) for i in self._script("reap", keys, [limit, queue, "list"])]
            # Still running in the database: the lapse came first in Redis, or the
            # database's lease expired but its reap has not closed the attempt yet (a
            # row another dispatcher holds, or one expired since this pass's reap). The
            # slot stays taken until the attempt is closed (lua/reap.lua).
            lapsed = sorted(set(lapsed) - _still_running(lapsed, self.using))
            if lapsed:
                ids += [int(i) for i in self._script("reap", keys, [limit, queue, "take",
                                                                     *lapsed])]
        return ids


def _still_running(run_ids: list[int], using: str) -> set[int]:
    if not run_ids:
        return set()
    return set(Run.objects.using(using).filter(
        pk__in=run_ids, state=RunState.RUNNING).values_list("pk", flat=True))
