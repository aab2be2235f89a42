"""Acks: outcomes collected from the children, acked in batches in the ack lane
(docs/architecture.md, "runworker").

Each ack is a database transaction plus a Redis script. Acks batch themselves: an
outcome goes to the ack lane at once when the lane is idle, else waits for the ack in
flight to commit and goes with every outcome collected meanwhile (group commit). So a
lone run is acked without delay, and under load each ack carries what one ack's latency
gathered, instead of queueing small batches behind each other (BENCHMARKS.md, "W2").
"""

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from django.db import DataError

from runs import tracing
from runs.daemons.daemon import TRANSIENT
from runs.execution import continuation
from runs.execution.outcomes import report
from runs.models import AttemptOutcome
from runs.types import Outcome
from runs.worker.lease_ahead import leased_of
from scheduler_core import conf
from scheduler_core.logs import held_lines

ACK_BATCH_MAX = 512  # most outcomes in one ack: beyond, another ack is queued in the lane
# Ack batches submitted and not yet committed beyond which the worker leases no more: if
# the database falls behind, runs wait in the broker, not in this process. The same holds
# for outcomes waiting to be acked (acks failing, or slower than the children).
ACKS_IN_FLIGHT = 2
UNACKED_MAX = ACK_BATCH_MAX * (ACKS_IN_FLIGHT + 1)
# What an outcome the database or the JSON encoder cannot take raises: acked alone, then
# recorded as a failure (e.g. an int result longer than json.dumps allows).
POISON = (DataError, ValueError, TypeError)

log = logging.getLogger("scheduler.worker")


@dataclass
class AckBatch:
    """One batch of outcomes on its way through the ack lane: the ``offer`` made with it
    (runs/execution/continuation.py; None: none), and what its ack continued here (``leased``, the
    runs the ack leased to this worker, with their tasks) and left to the broker
    (``pushed``; None until the ack has run). Made by flush, filled by the lane's
    ack_call, taken by harvest."""

    offer: continuation.Offer | None
    leased: list = field(default_factory=list)
    pushed: int | None = None


class Acks:
    """The worker's acks: collect outcomes (add), hand them to the ack lane (flush) and
    take its answers (harvest). Owns the outcomes collected (``outcomes``), the ack
    calls in flight (``acking``) with their records (``batches``), the count of runs
    acked (``finished``) and the pause after a failed ack. The broker's books of the
    children's acks (``books``, BookKeeper) go before each ack; the runs an ack continued
    here go to the front of ``ahead``. Called by the Worker's round, the supervisor, the
    cancels and the children's acks (add)."""

    def __init__(self, config, broker, lanes, ahead, children, books,
                 stopping: Callable[[], bool], note_failure: Callable):
        self.config = config
        self.broker = broker
        self.lanes = lanes
        self.ahead = ahead
        self.children = children
        self.books = books
        self.stopping = stopping
        self.note_failure = note_failure
        self.outcomes: list[Outcome] = []
        self.acking: list[tuple[Future, list[Outcome]]] = []
        # id of an ack batch (its outcomes list, alive in ``acking`` until harvested) ->
        # its record: the offer made with it, what its ack continued here and pushed
        # (AckBatch; runs/execution/continuation.py).
        self.batches: dict[int, AckBatch] = {}
        self.finished = 0
        self.paused_until = 0.0

    def pending(self) -> int:
        """Outcomes collected and not yet committed."""
        return len(self.outcomes) + sum(len(batch) for _, batch in self.acking)

    def settled(self) -> int:
        """Runs finished or waiting to be acked (what ``max_runs`` counts)."""
        return self.finished + self.pending()

    def busy(self) -> bool:
        """Whether outcomes wait to be acked or an ack is in flight."""
        return bool(self.outcomes or self.acking)

    def backed_up(self) -> bool:
        """Whether the database falls behind: lease no more (ACKS_IN_FLIGHT, UNACKED_MAX)."""
        return len(self.acking) > ACKS_IN_FLIGHT or self.pending() > UNACKED_MAX

    def add(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)

    def count_finished(self, runs: int) -> None:
        """``runs`` were acked elsewhere (in the children: ChildAcks)."""
        self.finished += runs

    def flush(self, force: bool = False) -> None:
        """Hand the collected outcomes (at most ACK_BATCH_MAX) to the ack lane as one batch
        when the lane is idle, ACK_BATCH_MAX are collected, the worker is stopping or
        ``force`` (harvest takes the answer; a batch the database did not take comes
        back)."""
        if not self.outcomes:
            return
        now = time.monotonic()
        if not force and now < self.paused_until:
            return
        due = (force or self.stopping() or not self.acking
               or len(self.outcomes) >= ACK_BATCH_MAX)
        if not due:
            return
        # The books of the children's acks go first: a run one of them continued may be
        # among these outcomes (runs/worker/child_acks.py).
        self.books.keep(force=True)
        while self.outcomes:
            outcomes = self.outcomes[:ACK_BATCH_MAX]
            del self.outcomes[:ACK_BATCH_MAX]
            # The offer is made here, not in the lane: it reads the slots the main
            # thread changes.
            self.batches[id(outcomes)] = AckBatch(self.offer(outcomes))
            self.acking.append((self.lanes.ack.submit(self.ack_call, outcomes), outcomes))
            if not (force or self.stopping()):
                break  # the rest goes with the next ack, when this one has committed

    def offer(self, outcomes: list[Outcome]) -> continuation.Offer | None:
        """What this worker offers to run at once of the runs the ack of ``outcomes`` may
        make ready (runs/execution/continuation.py): as many as the successes it acks, at most one
        per child and never past ``max_runs``; none while stopping, nor while runs leased
        ahead wait here for a child (a continued run goes first in line: it would jump
        runs the lease's order put before it)."""
        c = self.config
        room = min(c.concurrency,
                   sum(1 for o in outcomes if o.outcome == AttemptOutcome.SUCCEEDED))
        if c.max_runs is not None:
            # ``outcomes`` are out of self.outcomes and not yet in self.acking: counted
            # here, or the last ack before max_runs continues a run past it.
            held = len(self.ahead) + len(self.children.handed()) + len(outcomes)
            room = min(room, c.max_runs - self.settled() - held)
        if room <= 0 or self.stopping() or len(self.ahead):
            return None
        return continuation.Offer(c.worker_id, frozenset(c.queues), room,
                                  conf.get("LEASE_TTL_S"))

    def ack_call(self, outcomes: list[Outcome]) -> list[bool]:
        """In the ack lane: ack ``outcomes`` in one transaction; returns which applied.
        The runs the ack continued on this worker wait in the batch's record
        (``batches``, keyed by the batch's id) for harvest."""
        batch = self.batches.get(id(outcomes))
        offer = batch.offer if batch is not None else None
        # The ack spans, begun before the call: the runs it makes (a workflow's next
        # nodes) store theirs (runs/tracing.py, releasing).
        spans = tracing.begin_acks(outcomes) if tracing.on() else None
        try:
            with tracing.releasing(spans and tracing.ack_spans(outcomes, spans)):
                # The broker's bookkeeping (forget, adopt) goes behind this call in the
                # lane: the continued runs are handed to the children without waiting for
                # it, and every later ack, theirs included, comes after it (the lane is
                # one thread).
                accepted = self.broker.complete(outcomes, offer, after=self.lanes.ack.later)
        except POISON:
            # One outcome the database refuses must not wedge the batch: ack one by one
            # and record a poison outcome as a plain failure.
            accepted = [self.complete_alone(outcome) for outcome in outcomes]
            if spans:
                tracing.acked(spans, outcomes, accepted)
            return accepted
        except BaseException as exc:
            if spans:
                tracing.acked(spans, outcomes, None, str(exc))
            raise
        if spans:
            tracing.acked(spans, outcomes, accepted)
        if offer is not None:
            try:
                leased = leased_of([lease for lease, _ in offer.taken], self.config.using)
                for run in leased:
                    run.watched = True  # the engine made it: its ack tells the listener
            except TRANSIENT:
                # Leased and committed: without their tasks they cannot start here, and
                # their leases lapse (LEASE_TTL_S) into a retry, as a lost worker's do.
                log.warning("worker: runs %s continued but not readable; left to lapse",
                            [lease.run_id for lease, _ in offer.taken])
                leased = []
            batch.leased, batch.pushed = leased, offer.pushed
        return accepted

    def harvest(self) -> None:
        """Take the ack lane's answers that have come: count the runs finished, report
        refused (stale) acks; a batch that failed on a broken connection goes back to be
        acked again in a second."""
        while self.acking and self.acking[0][0].done():
            future, outcomes = self.acking.pop(0)
            batch = self.batches.pop(id(outcomes), None) or AckBatch(None)
            try:
                accepted = future.result()
            except TRANSIENT as exc:
                self.note_failure("ack", exc)
                self.paused_until = time.monotonic() + 1.0
                self.outcomes = outcomes + self.outcomes
                continue
            self.finished += len(outcomes)
            leased, pushed = batch.leased, batch.pushed
            if leased:
                # Runs this ack made ready and leased to this worker
                # (runs/execution/continuation.py): first in line, for the children the ack
                # has just freed.
                self.ahead.put_front(leased)
            if any(accepted) and not (leased and pushed == 0):
                # An ack may have made runs ready (a workflow's downstream nodes, in its
                # transaction): look at once rather than after the idle poll. Not when it
                # continued here every run it made: the broker has nothing new, and a
                # lease at every hop of a chain competed with the hop for the 2 cores
                # (BENCHMARKS.md, "Workflows (W7)").
                self.ahead.wake_if_idle()
            if pushed != 0 and any(o.watched for o, ok
                                   in zip(outcomes, accepted, strict=True) if ok):
                # A workflow node's ack may have made its downstream nodes' runs: lease
                # now rather than at the idle poll (docs/workflows.md, "Latency"), also
                # when a lease sent before this ack committed comes back empty. Not when
                # the ack says it pushed none (all it made were continued here).
                self.ahead.wake(retry=True)
            # The batch's lines in one write, not one each (scheduler_core/logs.py).
            with held_lines():
                for outcome, ok in zip(outcomes, accepted, strict=True):
                    # A cancelled run's ack is refused by design, its handler stopped
                    # (runs/worker/cancels.py): reported (run_cancelled), not warned of.
                    if ok or outcome.outcome == AttemptOutcome.CANCELLED:
                        report_outcome(outcome)
                    else:
                        log.warning("worker: ack of run %s attempt %s refused: lease is "
                                    "stale", outcome.lease.run_id, outcome.lease.attempt)

    def drain(self) -> None:
        """At the stop: ack everything collected and wait for every ack (the books of the
        children's acks first); a last try on the main thread if the lane failed."""
        self.flush(force=True)
        self.books.settle()
        for future, _ in self.acking:
            future.exception()
        self.harvest()
        if self.outcomes:
            # The ack lane failed (database down?): one last try, whose error serve() logs.
            self.broker.complete(self.outcomes)
            self.outcomes = []

    def complete_alone(self, outcome: Outcome) -> bool:
        try:
            return self.broker.complete([outcome])[0]
        except POISON as exc:
            log.warning("worker: outcome of run %s cannot be stored (%s); recording "
                        "a failure instead", outcome.lease.run_id, exc)
            failure = Outcome(lease=outcome.lease, outcome=AttemptOutcome.FAILED,
                              error=f"the attempt's outcome could not be stored: {exc}",
                              took_s=outcome.took_s, task=outcome.task)
            applied = self.broker.complete([failure])[0]
            outcome.outcome, outcome.error, outcome.fate = (failure.outcome, failure.error,
                                                            failure.fate)
            return applied


# The run's state after an outcome with no fate of its own (a success, a cancel).
_STATE_OF = {AttemptOutcome.SUCCEEDED: "succeeded", AttemptOutcome.CANCELLED: "cancelled"}


def report_outcome(outcome: Outcome) -> None:
    """The log line, signals and count of an acked outcome (runs/execution/outcomes.py)."""
    task = outcome.task or outcome.lease.task or {}
    report(run_id=outcome.lease.run_id, job_id=task.get("job_id"),
           handler=task.get("handler"), attempt=outcome.lease.attempt,
           outcome=outcome.outcome, duration_s=outcome.took_s, error=outcome.error,
           state=outcome.fate or _STATE_OF.get(outcome.outcome, "failed"),
           queue=outcome.lease.queue, result=outcome.result)
