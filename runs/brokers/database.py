"""The database broker: the embedded default (docs/architecture.md, "Brokers").

The runs table is the working set: delayed = ``scheduled``/``retrying`` rows, ready =
``queued`` rows, leased = ``running`` rows. Claims use ``SELECT ... FOR UPDATE SKIP
LOCKED`` on PostgreSQL; on SQLite the lease transaction is IMMEDIATE (settings), which
serialises writers, so the same query is safe there.

The isolation policy (runs/tenancy/policy.py) is the Redis broker's, with two documented
differences (docs/scaling.md): the stride state of the priority classes lives in each
worker process rather than in one place, so shares hold per worker (and so overall); and
when any concurrency or rate limit is configured, claims take one transaction-scoped
advisory lock on PostgreSQL, which serialises them, so the counts they check stay true.

Idle workers wait on PostgreSQL's LISTEN/NOTIFY (runs/brokers/pg_listen.py): each
transaction that makes runs ready notifies their queues; on SQLite they poll.
"""

import time
from collections.abc import Callable

from django.db import connections, transaction
from django.db.models import Count, F, Min, Q

from runs.brokers import db_flow, pg_listen
from runs.brokers.base import Broker
from runs.brokers.db_promote import promote_pg
from runs.clock import db_now, to_ms
from runs.execution.leases import EARLY_MAX_S
from runs.execution.transitions import in_shards
from runs.flow import control as flow
from runs.models import DELAYED_STATES, RateBucket, Run, RunState
from runs.tenancy import policy
from runs.tenancy.limits import owner_limits
from runs.types import QueueDepth, RunRef, Slot
from scheduler_core import conf

CLAIM_LOCK = 0x5C4ED  # pg_advisory_xact_lock key serialising limited claims
CANDIDATES_PER_SLOT = 4  # rows fetched per wanted run when owner limits may skip some
ANNOUNCE_AHEAD_MS = 1000  # a push wakes idle workers for runs due within this


class DatabaseBroker(Broker):
    """Serve the broker contract from the runs table alone (no Redis)."""

    name = "database"
    ready_when_stored = True

    def __init__(self, using: str = "default"):
        super().__init__(using)
        self._stride: dict[str, policy.Stride] = {}
        self._listener: pg_listen.Listener | None = None
        # When (time.monotonic()) the earliest delayed run next_due_s found falls due:
        # the first claim from then promotes it itself (_claim), rather than wait for the
        # dispatcher's next round, as the Redis lease script promotes its shard's.
        self._due_at: float | None = None

    def push(self, runs: list[RunRef]) -> None:
        """Nothing to copy: the rows are the working set. Due runs are promoted at once so
        that a run triggered now does not wait for the dispatcher's next round (a run
        created due is stored queued and not pushed: ``ready_when_stored``); idle
        workers of the queues of runs due now are woken (runs/brokers/pg_listen.py)."""
        if runs:
            # A second ahead, as this process's clock may lag the database's: a run not
            # ready yet costs an idle worker one empty lease, the dispatcher's promote
            # wakes it again once the run is due.
            soon_ms = time.time() * 1000 + ANNOUNCE_AHEAD_MS
            self._promote(announce={r.queue for r in runs if to_ms(r.run_at) <= soon_ms})

    def promote(self, limit: int | None = None, shards: list[int] | None = None,
                queues: list[str] | None = None, within_s: float = 0.0) -> int:
        return self._promote(limit, shards, queues=queues, within_s=within_s)

    def _promote(self, limit: int | None = None, shards: list[int] | None = None,
                 announce: set[str] = frozenset(), queues: list[str] | None = None,
                 within_s: float = 0.0) -> int:
        """``promote``, waking idle workers of the queues of the runs moved and of
        ``announce`` (queues of runs already ready) with one NOTIFY per queue, sent at the
        transaction's commit; ``queues``: only runs of those (None: all)."""
        limit, within_s = limit or conf.get("PROMOTE_BATCH"), min(within_s, EARLY_MAX_S)
        if connections[self.using].vendor == "postgresql":
            return promote_pg(self.using, limit, shards, queues, announce, within_s)
        runs = Run.objects.using(self.using)
        # No early promote here: only PostgreSQL's lease statement tells a run's child
        # to wait for its run_at (runs/execution/leases.py).
        due = in_shards(runs.filter(state__in=DELAYED_STATES, run_at__lte=db_now(self.using)),
                        shards)
        if queues is not None:
            due = due.filter(queue__in=queues)
        with transaction.atomic(using=self.using):
            rows = list(
                due.order_by("run_at")
                .select_for_update(skip_locked=True)
                .values_list("pk", "queue")[:limit]
            )
            moved = runs.filter(pk__in=[row[0] for row in rows],
                                state__in=DELAYED_STATES).update(state=RunState.QUEUED) \
                if rows else 0
            pg_listen.notify_ready(self.using, {row[1] for row in rows} | set(announce))
            return moved

    def wait_ready(self, queues: list[str], timeout_s: float,
                   passing_on: Callable[[], bool] | None = None) -> bool:
        """As Broker.wait_ready, on PostgreSQL: block up to ``timeout_s`` seconds on the
        listen connection until a NOTIFY for one of ``queues`` (runs/brokers/pg_listen.py);
        ``passing_on()`` is asked every WAIT_SLICE_S and ends the wait when True (every
        idle worker hears a NOTIFY: there is nothing to pass on). False (the caller
        polls) on SQLite, and while the listen connection is lost and not yet open again."""
        if timeout_s < 0.001 or not queues or connections[self.using].vendor != "postgresql":
            return False
        if self._listener is None:
            self._listener = pg_listen.Listener(self.using)
        return self._listener.wait(queues, timeout_s, stop=passing_on)

    def end_waits(self) -> None:
        # A fresh listener next time: notifications heard by this one (its own promotes')
        # would end a later worker's first wait in this thread at once.
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def reconcile(self, batch: int = 5000, shards: list[int] | None = None,
                  keep_going=None) -> int:
        """Nothing can be lost: the runs table is the working set."""
        return 0

    def most_urgent_ready(self, queues: list[str]) -> dict[str, int]:
        # Per queue the first ready run in the lease's own order (the run_ready index):
        # the walk stops at the first run of an active job, however many wait.
        found: dict[str, int] = {}
        ready = Run.objects.using(self.using).filter(state=RunState.QUEUED,
                                                     job__status="active")
        for queue in queues:
            head = (ready.filter(queue=queue).order_by("priority", "run_at", "pk")
                    .values_list("priority", flat=True).first())
            if head is not None:
                found[queue] = head
        return found

    def next_due_s(self, queues: list[str]) -> float | None:
        """As Broker.next_due_s: the earliest delayed run of ``queues`` in the runs table,
        against the database's clock (two queries, only when a lease found nothing). The
        claim made once that time has come promotes it (_claim)."""
        first = (Run.objects.using(self.using)
                 .filter(state__in=DELAYED_STATES, queue__in=queues)
                 .aggregate(first=Min("run_at"))["first"])
        if first is None:
            self._due_at = None
            return None
        due_in = max((first - db_now(self.using)).total_seconds(), 0.0)
        self._due_at = time.monotonic() + due_in
        return due_in

    def _claim(self, queues: list[str], n: int) -> list[Slot]:
        if self._due_at is not None and time.monotonic() >= self._due_at:
            # A worker that slept to its next run's time starts it now: the dispatcher
            # promotes only every DISPATCH_INTERVAL_S, which was W3's lag (p50 64 ms).
            self._due_at = None
            self._promote(n, queues=queues)
        claimed: list[Slot] = []
        for queue in queues:
            if len(claimed) >= n:
                break
            claimed += self._claim_queue(queue, n - len(claimed))
        return claimed

    def _claim_queue(self, queue: str, n: int) -> list[Slot]:
        runs = Run.objects.using(self.using)
        limits = policy.queue_limits(queue)
        owner_default = conf.get("OWNER_CONCURRENCY")
        explicit = owner_limits(self.using)
        gated = flow.in_use(self.using)
        if limits.max_running or limits.rate or owner_default or explicit or gated:
            self._serialise()
        if limits.max_running:
            n = min(n, limits.max_running
                    - runs.filter(state=RunState.RUNNING, queue=queue).count())
        if limits.rate and n > 0:
            n = self._take_tokens(queue, limits, n)
        if n <= 0:
            return []
        room = None
        ready = runs.filter(state=RunState.QUEUED, queue=queue, job__status="active")
        if owner_default or explicit:
            room = self._owner_room(owner_default, explicit)
            ready = ready.exclude(job__owner_id__in=[o for o, r in room.items() if r <= 0])
        gates = db_flow.ClaimGates(self.using) if gated else None
        columns = ("pk", "queue", "shard", "job__owner_id", "priority", "run_at")
        if gates is not None:
            ready = ready.exclude(gates.exclusion())
            columns += db_flow.COLUMNS
        fetch = n * CANDIDATES_PER_SLOT if room is not None or gates else n
        classes = policy.classes()
        candidates = [
            list(ready.filter(priority__gte=c.lo, priority__lte=c.hi)
                 .order_by("priority", "run_at", "pk")
                 .select_for_update(skip_locked=True, of=("self",))
                 .values_list(*columns)[:fetch])
            for c in classes
        ]
        stride = self._stride.get(queue)
        if stride is None or stride.classes != classes:
            stride = self._stride[queue] = policy.Stride(classes)
        stride.settle([bool(c) for c in candidates])
        picked: list[tuple] = []
        heads = [0] * len(classes)
        while len(picked) < n:
            i = stride.choose([c for c in range(len(classes)) if heads[c] < len(candidates[c])])
            if i is None:
                break
            row = candidates[i][heads[i]]
            owner = row[3]
            heads[i] += 1
            if room is not None and owner is not None:
                left = room.get(owner, explicit.get(owner, owner_default) or None)
                if left is not None:
                    if left <= 0:
                        continue
                    room[owner] = left - 1
            if gates is not None and not gates.admit(row):
                if room is not None and owner is not None and owner in room:
                    room[owner] += 1
                continue
            stride.charge(i)
            picked.append(row)
        stride.settle([heads[c] < len(candidates[c]) for c in range(len(classes))])
        if limits.rate and len(picked) < n:
            self._return_tokens(queue, n - len(picked))
        if gates is not None:
            gates.save()
        picked.sort(key=lambda r: (r[4], r[5], r[0]))  # most urgent first, as Redis returns
        return [(r[0], r[1], r[2]) for r in picked]

    def _serialise(self) -> None:
        connection = connections[self.using]
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CLAIM_LOCK])

    def _owner_room(self, owner_default: int, explicit: dict[int, int]) -> dict[int, int]:
        """Owner id -> runs it may still start, for owners with a limit and runs running."""
        running = (Run.objects.using(self.using).filter(state=RunState.RUNNING)
                   .values("job__owner_id").annotate(n=Count("pk"))
                   .values_list("job__owner_id", "n"))
        room = {}
        for owner, count in running:
            limit = explicit.get(owner, owner_default)
            if owner is not None and limit:
                room[owner] = limit - count
        return room

    def _bucket(self, queue: str, limits: policy.QueueLimits) -> tuple[RateBucket, float]:
        now = db_now(self.using)
        bucket, _ = (RateBucket.objects.using(self.using).select_for_update()
                     .get_or_create(queue=queue,
                                    defaults={"tokens": limits.burst, "updated_at": now}))
        elapsed = max((now - bucket.updated_at).total_seconds(), 0.0)
        bucket.updated_at = now
        return bucket, min(limits.burst, bucket.tokens + elapsed * limits.rate)

    def _take_tokens(self, queue: str, limits: policy.QueueLimits, n: int) -> int:
        bucket, tokens = self._bucket(queue, limits)
        granted = min(n, int(tokens))
        bucket.tokens = tokens - granted
        bucket.save(using=self.using)
        return granted

    def _return_tokens(self, queue: str, unused: int) -> None:
        RateBucket.objects.using(self.using).filter(queue=queue).update(
            tokens=F("tokens") + unused)

    def depth(self) -> list[QueueDepth]:
        totals: dict[str, list[int]] = {}
        for queue, _shard, ready, delayed, leased in self.shard_depth():
            row = totals.setdefault(queue, [0, 0, 0])
            for j, count in enumerate((ready, delayed, leased)):
                row[j] += count
        return [QueueDepth(q, *totals[q]) for q in sorted(totals)]

    def shard_depth(self) -> list[tuple[str, int, int, int, int]]:
        rows = (
            Run.objects.using(self.using)
            .filter(state__in=[*DELAYED_STATES, RunState.QUEUED, RunState.RUNNING])
            .values("queue", "shard")
            .annotate(
                ready=Count("pk", filter=Q(state=RunState.QUEUED)),
                delayed=Count("pk", filter=Q(state__in=DELAYED_STATES)),
                leased=Count("pk", filter=Q(state=RunState.RUNNING)),
            )
            .order_by("queue", "shard")
        )
        return [(r["queue"], r["shard"], r["ready"], r["delayed"], r["leased"]) for r in rows]

