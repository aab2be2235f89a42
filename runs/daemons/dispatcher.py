"""The dispatcher daemon (``rundispatcher``): promotes due runs to ready, reaps expired
leases (retry with backoff or dead letter), releases runs held back by an owner's limit
once the owner has room, and reconciles the database with the broker so that a Redis
FLUSHALL or restart loses nothing (docs/architecture.md, "Daemons").

Dispatchers split the SHARDS shards of every queue between them by lease (runs.models.
ShardLease, the same protocol as the schedulers' partitions, runs/daemons/partitions.py): each
holds about ``SHARDS / live dispatchers`` of them, renews them every third of
SHARD_LEASE_TTL_S, and a dead dispatcher's shards are taken over once its leases expire,
within one TTL. Ownership only spreads the work: promote is atomic (one Lua call, or SKIP
LOCKED), reaping is fenced and reconcile is idempotent, so an overlap during a handover
is harmless.
"""

import os
import socket
import threading
import time
import uuid

from django.db import OperationalError, connections

from runs.alerts import late
from runs.alerts.deliver import deliver, prune_delivered
from runs.brokers import get_broker
from runs.daemons import isolation
from runs.daemons.daemon import Daemon
from runs.daemons.partitions import PartitionLeases
from runs.execution.outcomes import flush_counts
from runs.history import retention
from runs.history import time_partitions as history_partitions
from runs.models import ShardLease
from runs.tenancy.limits import owner_limits
from scheduler_core import conf
from scheduler_core.exceptions import BrokerUnavailable

# Reaping looks for leases that expired, which takes LEASE_TTL_S (60 s by default) to
# happen: once a second is soon enough. Every DISPATCH_INTERVAL_S (0.1 s) it was half of an
# idle dispatcher's CPU (5% of a core, then 2.5%), taken from the workers on a small
# machine. A reap that found work goes on every round until it finds none.
REAP_INTERVAL_S = 1.0
# Pruning the history (runs/history/retention.py): a batch a minute, and every round while the
# batches come back full. A batch of 200 takes 25-30 ms (bench/prune.py), so a round
# stays short (a batch of 1,000 by Django's delete() took 0.3 s and held up promotion).
# Time partitions (PostgreSQL, runs/history/time_partitions.py) are created ahead and retired
# in the same pass: a catalog query when there is nothing to do.
PRUNE_INTERVAL_S = 60.0
PRUNE_BATCH = 200
# How long a stopping dispatcher waits for its finisher thread, within the daemons' stop
# bound (runs/daemons/daemon.py STOP_BOUND_S, 5 s; a day's DROP takes 2-9 s here); past it the
# process exits, the DROP rolls back and the next pass redoes it.
FINISH_JOIN_S = 2.0


class Dispatcher(Daemon):
    """One round: renew shard leases when due; for the held shards, reconcile if the
    broker lost their state (or RECONCILE_INTERVAL_S passed), promote due runs, unpark
    runs whose owner has room, reap expired leases (at most every REAP_INTERVAL_S unless
    the last reap found some), prune the history past HISTORY_RETENTION_S (a batch every
    PRUNE_INTERVAL_S, every round while there is a backlog)."""

    name = "dispatcher"

    def __init__(self, using: str = "default", dispatcher_id: str | None = None,
                 broker=None):
        super().__init__(using)
        self.broker = broker or get_broker(using)
        self.interval_s = conf.get("DISPATCH_INTERVAL_S")
        self.reconcile_every_s = conf.get("RECONCILE_INTERVAL_S")
        self.dispatcher_id = dispatcher_id or (
            f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}")
        ttl_s = conf.get("SHARD_LEASE_TTL_S")
        self.leases = PartitionLeases(self.dispatcher_id, self.broker.shard_count(), ttl_s,
                                      using, model=ShardLease)
        self.renew_every_s = ttl_s / 3
        self.last_renew = float("-inf")
        self.unreachable_since: float | None = None  # monotonic; the broker failed since
        self.last_reconcile = float("-inf")
        self.last_reap = float("-inf")
        self.reaped = 0
        self.last_prune = float("-inf")
        self.prune_backlog = False
        self.finisher: threading.Thread | None = None
        self.last_alert = float("-inf")
        conf.get("HISTORY_RETENTION_S")  # a value that is not a number fails at start

    @property
    def shards(self) -> list[int]:
        """The shards this dispatcher holds now."""
        return self.leases.owned

    def round(self) -> bool:
        if time.monotonic() - self.last_renew >= self.renew_every_s:
            self.last_renew = time.monotonic()
            self.renew_leases()
        shards = self.shards
        if not shards:
            return False
        scope = shards if len(shards) < self.leases.total else None
        try:
            busy = self.serve_shards(shards, scope)
        except BrokerUnavailable:
            if self.unreachable_since is None:
                self.unreachable_since = time.monotonic()
            raise
        self.unreachable_since = None
        # Each duty fails alone (runs/daemons/isolation.py): a poisoned row in one must not stop
        # the others, nor the process.
        pruned = self.faults.run("prune", lambda: self.prune_if_due(scope), default=0)
        self.alert_if_due()
        return busy or bool(pruned)

    def sleep(self, seconds: float) -> None:
        """Daemon.sleep, at most a renewal interval: a failing round's backoff (up to 5 s)
        let the shard leases lapse while held, and kept the shards of a dispatcher that
        took them back after a failover away from everyone until they expired."""
        super().sleep(min(seconds, self.renew_every_s))

    def renew_leases(self) -> None:
        """Renew the shard leases (PartitionLeases.refresh), unless the broker has failed
        this dispatcher's rounds for a renewal interval: then give them back, so that a
        dispatcher that reaches the broker takes them at its next renewal instead of
        after SHARD_LEASE_TTL_S (or never, while this one renewed them). Holding none, it
        takes shards again at a later renewal, once the broker answers a ping. Raises
        BrokerUnavailable when it gave its shards back or the ping failed (serve retries
        the round with backoff)."""
        if self.unreachable_since is None:
            self.leases.refresh()
            return
        down_s = time.monotonic() - self.unreachable_since
        if self.leases.owned and down_s >= self.renew_every_s:
            self.log.warning("dispatcher: broker unreachable for %.1f s; giving back "
                             "shards %s for a dispatcher that reaches it", down_s,
                             self.leases.owned)
            self.leases.release_all()
            raise BrokerUnavailable(f"unreachable for {down_s:.1f} s; shards given back")
        if not self.leases.owned:
            self.broker.ping()  # BrokerUnavailable: still unreachable, hold nothing
            self.unreachable_since = None
        self.leases.refresh()

    def serve_shards(self, shards: list[int], scope: list[int] | None) -> bool:
        """The broker's part of a round over the held ``shards`` (``scope``: the same,
        None when they are all of them): reconcile when due, promote, unpark, reap.
        Returns whether it did work; raises BrokerUnavailable. Each duty fails alone
        (runs/daemons/isolation.py)."""
        run = self.faults.run
        reconciled = run("reconcile", lambda: self.reconcile_if_due(shards, scope), default=0)
        promoted = run("promote", lambda: self.broker.promote(shards=scope), default=0)
        unparked = run("unpark", lambda: self.broker.unpark(scope), default=0)
        reaped = 0
        if self.reaped or time.monotonic() - self.last_reap >= REAP_INTERVAL_S:
            self.last_reap = time.monotonic()
            reaped = self.reaped = run("reap", lambda: self.broker.reap(shards=scope),
                                       default=0)
        if reaped:
            self.log.info("dispatcher: %d expired leases retried or dead-lettered", reaped)
        return bool(promoted or reaped or reconciled or unparked)

    def reconcile_if_due(self, shards: list[int], scope: list[int] | None) -> int:
        """Reconcile ``shards`` (``scope``, as serve_shards) when the broker lost their
        state or RECONCILE_INTERVAL_S passed; returns the runs pushed."""
        if not (self.broker.needs_reconcile(shards)
                or time.monotonic() - self.last_reconcile >= self.reconcile_every_s):
            return 0
        # Mark first: a flush during the scan removes the mark and triggers another.
        self.broker.mark_reconciled(shards)
        self.broker.sync_limits(owner_limits(self.using))
        reconciled = self.broker.reconcile(shards=scope, keep_going=lambda: not self.stopping)
        self.last_reconcile = time.monotonic()
        if reconciled:
            self.log.info("dispatcher: reconcile pushed %d runs the broker lacked", reconciled)
        return reconciled

    def alert_if_due(self) -> None:
        """Every ALERT_POLL_S: raise late-start alerts, deliver the owners' pending alerts
        (docs/alerts.md), and add the outcomes counted by this process's reaps to the
        database (runs/execution/outcomes.py)."""
        if time.monotonic() - self.last_alert < conf.get("ALERT_POLL_S"):
            return
        self.last_alert = time.monotonic()
        run = self.faults.run
        run("outcome_counts", lambda: flush_counts(self.using))
        run("late_alerts", lambda: late.scan(self.using))
        run("alerts", lambda: deliver(self.using, self.faults))
        isolation.flush_counts(self.using)  # the failures counted where no faults are

    def prune_if_due(self, scope: list[int] | None) -> int:
        """Delete a batch of the history past HISTORY_RETENTION_S in this dispatcher's
        shards (``scope``; None: all) and a batch of Idempotency-Key responses past
        IDEMPOTENCY_TTL_S when due; returns the rows of both deleted."""
        if not (self.prune_backlog or time.monotonic() - self.last_prune >= PRUNE_INTERVAL_S):
            return 0
        self.last_prune = time.monotonic()
        keys = retention.prune_idempotency_keys(PRUNE_BATCH, self.using)
        if keys:
            self.log.info("dispatcher: pruned %d Idempotency-Key responses past "
                          "IDEMPOTENCY_TTL_S", keys)
        self.prune_backlog = keys >= PRUNE_BATCH
        retention_s = conf.get("HISTORY_RETENTION_S")
        before = retention.cutoff(retention_s, self.using)
        self.keep_partitions(before)
        if before is None:  # keep everything
            return keys
        pruned = retention.Pruned()
        for where in history_partitions.row_scopes(self.using):
            pruned.add(retention.prune(before, PRUNE_BATCH, self.using, scope, where))
        prune_delivered(self.using)
        self.prune_backlog = self.prune_backlog or pruned.runs >= PRUNE_BATCH
        if pruned.runs:
            self.log.info("dispatcher: pruned %d runs finished over %s s ago (%d attempts, "
                          "%d log lines, %d one-off jobs)", pruned.runs, f"{retention_s:g}",
                          pruned.attempts, pruned.log_lines, pruned.jobs)
        return pruned.runs + keys

    def keep_partitions(self, before) -> None:
        """Create the time partitions ahead and, when some are wholly past the retention
        cutoff ``before`` (None: keep all) or were detached and not dropped, start the
        retire thread (retire); PostgreSQL only (history_partitions.create_ahead).
        Tables kept locked by others past the lock timeout, or a deadlock, leave it for
        the next pass: the dispatcher goes on serving."""
        try:
            if not history_partitions.partitioned(self.using):
                return  # SQLite, or plain tables: the row prune does it all
            history_partitions.create_ahead(self.using)
            if self.finisher is not None and self.finisher.is_alive():
                return  # the last ones are still being retired: more next pass
            with connections[self.using].cursor() as cursor:
                due = ((before is not None and history_partitions.expired(cursor, before))
                       or history_partitions.detached(cursor))
        except OperationalError as exc:
            self.log.warning("dispatcher: time partitions not kept this round (%s)",
                             str(exc).strip())
            return
        if not due:
            return
        self.finisher = threading.Thread(target=self.retire, args=(before,), daemon=True,
                                         name="dispatcher-retire-partitions")
        self.finisher.start()

    def retire(self, before) -> None:
        """The retire thread, on a connection of its own (closed after): detach the
        partitions wholly past ``before`` (retention.drop_partitions without finish: the
        runs leave the tables under a few hundred ms of exclusive locks, after reading
        what it copies back unlocked), then retention.finish_detached. The rounds never
        wait for either: at 10 M runs a partition's detach reads seconds of cold pages
        and its drop costs the filesystem seconds (docs/retention.md, "Retired whole").
        A failure is logged and left to the next pass."""
        try:
            if before is not None:
                dropped = retention.drop_partitions(before, self.using, count=False,
                                                    finish=False)
                if dropped.runs:
                    self.log.info("dispatcher: detached time partitions past the "
                                  "retention: about %d runs, %d attempts, %d log lines",
                                  dropped.runs, dropped.attempts, dropped.log_lines)
            finished = retention.finish_detached(self.using, count=False)
            if finished.runs or finished.jobs:
                self.log.info("dispatcher: dropped detached time partitions: about %d "
                              "runs, %d attempts, %d log lines; %d one-off jobs",
                              finished.runs, finished.attempts, finished.log_lines,
                              finished.jobs)
        except OperationalError as exc:
            self.log.warning("dispatcher: time partitions not retired this pass (%s)",
                             str(exc).strip())
        except Exception:  # a thread's exception would only reach stderr
            self.log.exception("dispatcher: time partitions not retired this pass")
        finally:
            connections[self.using].close()

    def shutdown(self) -> None:
        self.leases.release_all()
        if self.finisher is not None:  # a drop cut short rolls back: the next pass redoes it
            self.finisher.join(FINISH_JOIN_S)
