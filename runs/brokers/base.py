"""The broker contract (docs/architecture.md, "Brokers" and "Conventions in the code").

A broker is the working set of runs that are due or leased. PostgreSQL (or SQLite) stays
the source of truth: each state change a fenced UPDATE (runs/execution/), the broker can
be rebuilt from the runs table (``reconcile``). Concrete brokers implement the verbs marked
abstract below; leasing, heartbeats, acks, retries, dead letters and reaping are shared:

- ``push`` is idempotent; a run whose ``run_at`` has passed goes straight to ready.
- ``promote`` moves due runs to ready atomically; racing dispatchers never move one twice.
- ``lease`` hands each ready run to exactly one caller, ordered by priority (0 first)
  then ``run_at``, then id; the lease is fenced by the run's attempt number.
- ``heartbeat`` extends leases still held and reports the ones that were lost.
- ``complete`` applies an attempt's outcome only if its lease is still the current one
  (a stale worker's ack is refused); failures retry after 1, 2, 4, 8 ... s (capped) and
  dead-letter after ``max_attempts``.
- ``reap`` retries or dead-letters runs whose lease expired on the database clock.

Times are aware UTC datetimes; durations are seconds unless a name ends in ``_ms``.
"""

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import nullcontext

from django.db import DatabaseError, transaction

from runs.execution import completion, continuation, transitions
from runs.execution import leases as run_leases
from runs.models import PENDING_STATES, Run
from runs.tenancy import policy
from runs.types import Books, Lease, Outcome, QueueDepth, RunRef, Slot
from scheduler_core import conf
from scheduler_core.exceptions import BrokerUnavailable

log = logging.getLogger("scheduler.broker")


class Broker(ABC):
    """Base of every broker. ``using`` is the Django database alias holding the runs."""

    name = ""
    # Whether _claim writes to the database (and so must share the lease's transaction).
    claims_in_database = True
    # Whether a run stored due may be stored ready (``queued``), needing no push: true
    # where the runs table is the working set (jobs/ingest/one_off.py).
    ready_when_stored = False

    def __init__(self, using: str = "default"):
        self.using = using
        self._swrr: dict[tuple[str, ...], dict[str, int]] = {}

    # --- working-set verbs each broker implements -------------------------------------

    @abstractmethod
    def push(self, runs: list[RunRef]) -> None:
        """Add runs to the working set: ready if ``run_at`` has passed, else delayed.
        Idempotent: pushing a run already present moves it rather than duplicating it.
        Call after the transaction that created or changed the runs has committed."""

    @abstractmethod
    def promote(self, limit: int | None = None, shards: list[int] | None = None,
                queues: list[str] | None = None, within_s: float = 0.0) -> int:
        """Move up to ``limit`` (default PROMOTE_BATCH) delayed runs due now or within
        ``within_s`` s (at most EARLY_MAX_S: children wait for run_at) to ready, marked
        ``queued``, atomically; only of ``shards`` and ``queues`` (None: all). Returns how
        many moved."""

    @abstractmethod
    def _claim(self, queues: list[str], n: int) -> list[Slot]:
        """Take up to ``n`` ready runs from ``queues`` (in the order given), applying the
        isolation policy (runs/tenancy/policy.py): priority classes by weighted share, strict order
        inside a class, per-owner and per-queue limits, per-queue rate limits. Runs inside
        the lease transaction; no run may go to two callers."""

    @abstractmethod
    def depth(self) -> list[QueueDepth]:
        """Ready, delayed and leased counts per queue."""

    def _forget(self, slots: list[Slot]) -> None:
        """Drop runs from the broker's leased set (the run finished or was refused)."""
        return None

    def _adopt(self, taken: list[tuple[Lease, int | None]], ttl_s: float) -> None:
        """Record as leased for ``ttl_s`` seconds the runs the database leased in an
        ack's transaction (runs/execution/continuation.py; ``taken``: (lease, owner id or None)), as
        ``_claim`` would have. Nothing to do where claims are the database's rows."""
        return None

    def _settle(self, finished: list[Slot], taken: list[tuple[Lease, int | None]],
                ttl_s: float) -> None:
        """After an ack's commit: ``_forget(finished)`` and ``_adopt(taken, ttl_s)``
        (each under _after_commit's rule); a broker that can does both in one round trip
        (Redis: one pipeline)."""
        self._after_commit(self._forget, finished)
        if taken:
            self._after_commit(self._adopt, taken, ttl_s)

    def _extend(self, leases: list[Lease], ttl_s: float) -> None:
        """Extend the broker-side record of ``leases`` (the database row is the authority)."""
        return None

    def _lapse(self, slots: list[Slot]) -> None:
        """Make the claims on ``slots`` lapse at once (their start failed). Nothing to do
        where claims are rows of the lease's own transaction, rolled back with it."""
        return None

    def _expired_claims(self, limit: int, shards: list[int] | None = None) -> list[int]:
        """Ids whose broker-side lease lapsed; runs the database still calls pending are
        pushed again (a worker died between claiming and starting them)."""
        return []

    def next_due_s(self, queues: list[str]) -> float | None:
        """Seconds until the earliest delayed run of ``queues`` falls due (0 if one is
        due now), or None when the broker cannot tell cheaply; an idle worker sleeps that
        long instead of a whole WORKER_POLL_S."""
        return None

    # How late wait_ready may come back after its timeout: a worker whose next run falls
    # due within its wait plus this does not wait here (runs/worker/lease_ahead.py).
    wait_slack_s = 0.0

    def wait_ready(self, queues: list[str], timeout_s: float,
                   passing_on: Callable[[], bool] | None = None) -> bool:
        """Block up to ``timeout_s`` seconds until runs may have become ready in
        ``queues`` (a push woke it), for an idle worker between two empty leases; returns
        True if it waited (woken or timed out: the caller leases again now), False if
        this broker cannot wait so, or not now (the caller sleeps until its next lease
        itself). ``passing_on``, asked once woken: True when the caller will not lease
        after all (it is stopping), so the wake goes to another waiting worker. Raises
        nothing: the lease reports an unreachable broker. This default cannot wait."""
        return False

    def end_waits(self) -> None:
        """Close what ``wait_ready`` opened beyond Django's connections (the database
        broker's listen connection), when this process stops waiting (a worker's end);
        a later wait opens it again. This default opened nothing."""
        return None

    def most_urgent_ready(self, queues: list[str]) -> dict[str, int]:
        """{queue: the most urgent priority (0-9, 0 first) among the runs of ``queues``
        ready to lease now}, queues with none left out: an ack continues no run while a
        more urgent one waits (runs/execution/continuation.py). Raises BrokerUnavailable
        when the broker cannot be read. This default knows of nothing waiting."""
        return {}

    def shard_count(self) -> int:
        """How many shards each queue is split into (SHARDS)."""
        return max(conf.get("SHARDS"), 1)

    def shard_depth(self) -> list[tuple[str, int, int, int, int]]:
        """``(queue, shard, ready, delayed, leased)`` for every queue shard with runs."""
        return []

    def unpark(self, shards: list[int] | None = None) -> int:
        """Give runs held back by their owner's limit another chance once the owner has
        room (``shards``: only those; None: all). Returns how many were released."""
        return 0

    def sync_limits(self, limits: dict[int, int]) -> None:
        """Make the broker enforce ``limits`` (owner id -> most running runs)."""
        return None

    def missing(self, slots: list[Slot]) -> list[int]:
        """Of these pending runs, the ids of those the broker does not hold (reconcile)."""
        return []

    def needs_reconcile(self, shards: list[int] | None = None) -> bool:
        """True when the broker has lost the state of any of ``shards`` (default: all),
        e.g. Redis was flushed or restarted, since ``mark_reconciled``; the dispatcher then
        reconciles at once."""
        return False

    def mark_reconciled(self, shards: list[int] | None = None) -> None:
        """Record that the working set of ``shards`` (default: all) was rebuilt from the
        database."""
        return None

    def ping(self) -> None:
        """Raise BrokerUnavailable (or a database error) if the broker cannot be reached."""
        Run.objects.using(self.using).exists()

    # --- shared operations --------------------------------------------------------------

    def cancelled(self, leases: list[Lease]) -> set[int]:
        """The ids of the runs of ``leases`` cancelled while held under that lease: their
        worker stops the handler (docs/architecture.md, "Cancelling a running run")."""
        return transitions.cancelled_under(leases, self.using)

    def lease(self, queues: list[str], n: int, worker_id: str,
              ttl_s: float | None = None, weights: dict[str, int] | None = None) -> list[Lease]:
        """Lease up to ``n`` ready runs from ``queues`` to ``worker_id`` for ``ttl_s``
        seconds (default LEASE_TTL_S). Each run is leased to exactly one caller; each lease
        starts a new attempt (an Attempt row) whose number fences later acks.

        Without ``weights`` the queues are served in the order given. With ``weights``
        (queue -> positive int) the ``n`` slots are split between the queues by smooth
        weighted round-robin (as nginx's upstream balancer), so over many calls each
        backlogged queue gets its weight's share; slots a queue cannot fill go to the
        others."""
        ttl_s = ttl_s or conf.get("LEASE_TTL_S")
        claimed_at = time.monotonic()
        with self._lease_transaction():
            if weights and len(queues) > 1:
                claimed = self._claim_weighted(queues, n, weights)
            else:
                claimed = self._claim(queues, n)
            unstarted: set[int] = set()
            try:
                leases = run_leases.start_attempts(
                    [slot[0] for slot in claimed], worker_id, ttl_s, self.using
                )
            except run_leases.PartlyStarted as part:  # its first statement's leases stand
                log.warning("lease: %s; their claims lapse: %s", part, part.__cause__)
                leases, unstarted = part.leases, set(part.unstarted)
                self._lapse_soon([s for s in claimed if s[0] in unstarted], claimed_at, ttl_s)
            except Exception:
                self._lapse_soon(claimed, claimed_at, ttl_s)
                raise
        started = {lease.run_id: lease for lease in leases}
        refused = [s for s in claimed if s[0] not in started and s[0] not in unstarted]
        if refused:
            self._forget(refused)
        return [started[slot[0]] for slot in claimed if slot[0] in started]

    def _lapse_soon(self, claimed: list[Slot], claimed_at: float, ttl_s: float) -> None:
        """Let claims whose runs were not started lapse now, not in LEASE_TTL_S (best effort),
        only well within their TTL: one that lapsed meanwhile may be another worker's."""
        if claimed and time.monotonic() - claimed_at < min(ttl_s, conf.get("LEASE_TTL_S")) / 2:
            self._after_commit(self._lapse, claimed)

    def _lease_transaction(self):
        """The transaction a lease runs in: none when the claim is the broker's alone and
        start_attempts needs none (PostgreSQL: run_leases.one_statement), since BEGIN and
        COMMIT cost two of a lease's four round trips (BENCHMARKS.md); a claim made in Redis
        is never part of a database transaction anyway (one whose start fails lapses)."""
        if not self.claims_in_database and run_leases.one_statement(self.using):
            return nullcontext()
        return transaction.atomic(using=self.using)

    def _claim_weighted(self, queues: list[str], n: int, weights: dict[str, int]) -> list[Slot]:
        current = self._swrr.setdefault(tuple(queues), dict.fromkeys(queues, 0))
        wanted = policy.swrr_plan(queues, n, weights, current)
        claimed: list[Slot] = []
        short, failure, reached = set(), None, False
        for queue in [q for q in queues if wanted[q]] + [None]:
            # None: the queues that had all they wanted fill what the others lacked.
            others = [q for q in queues if q not in short]
            if queue is None and (len(claimed) >= n or not others):
                break
            try:  # a queue out of reach (its master failing over) holds up no other
                got = self._claim([queue] if queue else others,
                                  wanted[queue] if queue else n - len(claimed))
                reached = True
            except BrokerUnavailable as exc:
                failure, got = failure or exc, []
            claimed += got
            if queue and len(got) < wanted[queue]:
                short.add(queue)
        if failure is not None and not reached:
            raise failure
        return claimed

    def heartbeat(self, leases: list[Lease], ttl_s: float | None = None) -> list[Lease]:
        """Extend ``leases`` by ``ttl_s`` seconds from now; returns the leases still held,
        with their new expiry. A lease not returned was lost and must not be acked."""
        ttl_s = ttl_s or conf.get("LEASE_TTL_S")
        held = run_leases.extend_leases(leases, ttl_s, self.using)
        self._after_commit(self._extend, held, ttl_s)
        return held

    def complete(self, outcomes: list[Outcome], offer: continuation.Offer | None = None,
                 after=None) -> list[bool]:
        """Ack attempts (success, failure, timeout, crash), fenced; returns per outcome
        whether it was applied (False: the lease was stale, nothing changed).

        ``offer`` (the acking worker's, runs/execution/continuation.py): runs the ack makes ready
        may be leased to that worker in the ack's transaction; they are in
        ``offer.taken`` once this returns, recorded as leased by the broker too.

        ``after`` (optional, a callable taking a no-argument callable): the broker's
        bookkeeping after the commit (forget the finished runs, adopt the continued ones,
        push the retries) is handed to it instead of done before returning; the worker
        queues it on its ack lane, ahead of any later ack, so the runs its ack continued
        reach the children a broker round trip sooner (docs/workflows.md, "Latency")."""
        accepted, books = self.complete_only(outcomes, offer)
        if after is None:
            self.keep_books(books)
        else:
            after(lambda: self.keep_books(books))
        return accepted

    def complete_only(self, outcomes: list[Outcome], offer: continuation.Offer | None = None
                      ) -> tuple[list[bool], Books]:
        """``complete`` without the broker's bookkeeping: returns (accepted, the
        bookkeeping owed, for ``keep_books``, in this process or another: a worker's
        child that acked a workflow node hands it to its worker, runs/worker/handoff.py)."""
        if offer is not None and offer.ready_head is None:
            offer.ready_head = self.most_urgent_ready
        with continuation.offering(offer):
            accepted, retried = completion.complete(outcomes, self.using)
        # A refused ack's run may be leased to another worker by now: its broker-side
        # lease (and the limit counters) are that worker's; a lapsed one is reaped. Not
        # one cancelled under it: none else holds it (docs/isolation.md, "Concurrency limits").
        finished = [o.lease.slot for o, ok in zip(outcomes, accepted, strict=True) if ok]
        refused = [o.lease for o, ok in zip(outcomes, accepted, strict=True) if not ok]
        if refused and not self.claims_in_database:  # the database's slots are its rows
            transitions.cancelled_under(refused, self.using, then=lambda gone: (
                self._after_commit(self._forget, [lease.slot for lease in gone])))
        taken = list(offer.taken) if offer is not None else []
        ttl_s = offer.ttl_s if offer is not None else 0.0
        return accepted, Books(finished, taken, ttl_s, list(retried))

    def keep_books(self, books: Books) -> None:
        """The bookkeeping after an ack's commit (complete_only): forget the finished
        runs, adopt the continued ones, push the retries; a broker outage is logged, not
        raised (_after_commit)."""
        self._settle(books.finished, books.taken, books.ttl_s)
        self._after_commit(self._push_ids, books.retried)

    def release(self, leases: list[Lease]) -> list[int]:
        """Give leased runs back for another worker at once (graceful shutdown); the
        released attempt does not count against max_attempts. Returns the ids released."""
        released = transitions.release(leases, self.using)
        mine = set(released)
        self._after_commit(self._forget, [lease.slot for lease in leases
                                          if lease.run_id in mine])
        self._after_commit(self._push_ids, released)
        return released

    def reap(self, limit: int | None = None, shards: list[int] | None = None) -> int:
        """Retry or dead-letter runs whose lease expired (database clock), and push back
        runs the broker claimed for a worker that died before starting them. ``shards``:
        only runs of those shards (a dispatcher's own; None: all)."""
        limit = limit or conf.get("REAP_BATCH")
        retried = transitions.expire_leases(limit, self.using, shards)
        self._push_ids(retried)
        lapsed = self._expired_claims(limit, shards)
        if lapsed:
            self._push_ids(lapsed, pending_only=True)
        return len(retried)

    def reconcile(self, batch: int = 5000, shards: list[int] | None = None,
                  keep_going=None) -> int:
        """Push every pending run of an active job that the broker lacks (after a Redis
        FLUSHALL or restart); ``shards``: only those shards. ``keep_going`` (a callable
        returning bool, optional) is asked before each batch of ``batch`` runs after the
        first, so a stopping dispatcher leaves a scan of a million pending runs between
        two batches. Returns how many were pushed again."""
        pushed, last_id = 0, 0
        pending = transitions.in_shards(Run.objects.using(self.using).filter(
            state__in=PENDING_STATES, job__status="active"), shards)
        while last_id == 0 or keep_going is None or keep_going():
            slots = list(pending.filter(pk__gt=last_id).order_by("pk")
                         .values_list("pk", "queue", "shard")[:batch])
            if not slots:
                return pushed
            last_id = slots[-1][0]
            lacking = self.missing(slots)
            if lacking:
                self._push_ids(lacking, pending_only=True)
                pushed += len(lacking)
        return pushed

    def push_after_commit(self, refs: list[RunRef]) -> None:
        """Push ``refs`` once the current transaction on ``using`` commits (docs/architecture.md,
        "Conventions in the code": commit first, then push).
        A failed push is logged, not raised: the dispatcher's reconcile restores it."""
        if refs:
            transaction.on_commit(lambda: self._push_quietly(refs), using=self.using)

    def _push_quietly(self, refs: list[RunRef]) -> None:
        try:
            self._after_commit(self.push, refs)
        except Exception:  # noqa: BLE001 - the runs are committed: reconcile pushes them
            # Raised out of the commit's callbacks, anything else would report the
            # committed jobs as failed, and a client that retries would make them twice.
            log.exception("broker push deferred to reconcile: %d runs", len(refs))

    def _after_commit(self, step, *args) -> None:
        """Broker bookkeeping after the database has committed: a broker outage must not
        turn a committed ack into an error (the caller would ack again) — reap and
        reconcile repair whatever the broker missed."""
        try:
            step(*args)
        except (BrokerUnavailable, DatabaseError) as exc:
            log.warning("broker %s deferred to reap/reconcile: %s", step.__name__, exc)

    def _push_ids(self, run_ids: list[int], pending_only: bool = False) -> None:
        if not run_ids:
            return
        runs = Run.objects.using(self.using).filter(pk__in=run_ids)
        if pending_only:
            runs = runs.filter(state__in=PENDING_STATES, job__status="active")
        refs = transitions.run_refs(runs)
        if refs:
            self.push(refs)
