"""The worker's side of acks made in its children (runs/worker/handoff.py has the rule
and the child's side): when to allow them, what the child's ``acking``, ``acked`` and
``ack_back`` messages change, and what happens to an outcome whose child never said how
its ack went (the worker acks it itself, fenced).
"""

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future

from runs.models import AttemptOutcome
from runs.types import Books, Outcome
from runs.worker import handoff
from runs.worker.acks import report_outcome
from runs.worker.cancels import cancelled_outcome
from runs.worker.lease_ahead import leased_of
from runs.worker.pool import InFlight, Slot

log = logging.getLogger("scheduler.worker")


class BookKeeper:
    """The broker's books the children's acks left (Books): owed (``owed``) until handed
    to the ack lane, all in one call, when the last such call (``call``) has ended. A
    fast chain's hops then share the broker's round trips, as the worker's own acks share
    commits. ChildAcks owes them; Acks keeps them before each ack of its own (which must
    come after them); the Worker's round keeps them."""

    def __init__(self, broker, lanes):
        self.broker = broker
        self.lanes = lanes
        self.owed: list[Books] = []
        self.call: Future | None = None
        self.wake_at_end = False  # the call in flight wakes the worker when it ends

    def owe(self, books: Books) -> None:
        self.owed.append(books)

    def keep(self, force: bool = False) -> None:
        """Hand the books owed to the ack lane when the last call has ended, or at once
        when ``force``."""
        if not self.owed:
            return
        if not force and self.call is not None and not self.call.done():
            # The call was made not to wake the worker; what is owed now must go when it
            # ends, not at the loop's next wake-up for something else (up to
            # WORKER_POLL_S, the finished runs counted against their limits meanwhile).
            if not self.wake_at_end:
                self.wake_at_end = True
                self.call.add_done_callback(lambda _: self.lanes.wake())
            return
        self.wake_at_end = False
        owed, self.owed = self.owed, []
        self.call = self.lanes.ack.submit(self.broker.keep_books, merge_books(owed),
                                          wake=False)

    def settle(self) -> None:
        """At the stop: hand over what is owed and wait until the broker has it (the runs
        adopted before the release forgets them)."""
        self.keep(force=True)
        if self.call is not None:
            self.call.exception()


class ChildAcks:
    """The worker's side of the children's acks: when to allow them (allow), the
    children's ``acking``, ``acked`` and ``ack_back`` messages (child_message, from the
    supervisor), and acking here, fenced, a success whose child never said how its ack
    went (take_pending, ack_pending_and_restart). Owns ``handoff`` (a handoff.Handoff, or
    None: no acks in the children; set by enable before the children are made) and the
    count ``acked_in_children``. Reports to ``acks`` and ``books``; continued runs go to
    ``ahead``."""

    def __init__(self, config, ahead, children, acks, books: BookKeeper,
                 stopping: Callable[[], bool]):
        self.config = config
        self.ahead = ahead
        self.children = children
        self.acks = acks
        self.books = books
        self.stopping = stopping
        self.handoff: handoff.Handoff | None = None
        self.acked_in_children = 0  # for operators and tests

    def enable(self, handoff_config: handoff.Handoff) -> None:
        self.handoff = handoff_config

    @property
    def enabled(self) -> bool:
        return self.handoff is not None

    def allow(self) -> None:
        """Allow the children to ack workflow nodes themselves while the worker holds no
        run leased ahead (a continued run would jump it), is not stopping and has no
        ``max_runs`` (a run continued in a child is counted after the fact); never a
        child that is full (Slot.full: at its runs per child, or retiring)."""
        allowed = (self.handoff is not None and not self.stopping() and not len(self.ahead)
                   and self.config.max_runs is None)
        for slot in self.children.slots:
            # A child to be handed no more runs must not continue one itself either
            # (runs/worker/recycle.py).
            want = allowed and not slot.full
            if slot.allowed != want:
                slot.allow(want)

    def child_message(self, slot: Slot, current: InFlight, message: tuple) -> bool:
        """Handle ``message`` if it is about an ack in the child (True), else False."""
        kind = message[0]
        if kind == "acking":
            self.child_acking(current, message)
        elif kind == "acked":
            self.child_acked(slot, current, message)
        elif kind == "ack_back":
            self.take_pending(slot)
            slot.begin_head(time.monotonic())
        else:
            return False
        return True

    def child_acking(self, current: InFlight, message: tuple) -> None:
        """The child's run succeeded and its child is acking it: hold the outcome, and
        give the ack as long as a lease lasts before the child is cut off."""
        _, _, _, _, result, _, _, began, finished, _ = message
        took = finished - began
        current.pending = Outcome(lease=current.lease, outcome=AttemptOutcome.SUCCEEDED,
                                  result=result, took_s=took, task=current.task,
                                  watched=True)
        current.deadline = time.monotonic() + self.handoff.ttl_s
        self.children.note_run_time(took)

    def child_acked(self, slot: Slot, current: InFlight, message: tuple) -> None:
        """The child's ack committed: count and report it, keep the broker's books in the
        ack lane (behind the acks before it, ahead of those after), and take the run it
        continued as the child's run now executing."""
        _, _, _, state, error, fate, pushed, books, started, at = message
        outcome = current.pending
        if outcome is None:
            # Its ``acking`` was not heard (wire.in_order keeps them in order; this is the
            # fault isolation): the ack committed all the same, reported as this says.
            log.warning("worker: run %s acked in its child without its outcome heard",
                        current.lease.run_id)
            outcome = Outcome(lease=current.lease, outcome=state, took_s=at - current.began,
                              task=current.task, watched=True)
        outcome.outcome, outcome.error, outcome.fate = state, error, fate
        slot.pop_finished()
        self.acks.count_finished(1)
        self.acked_in_children += 1
        report_outcome(outcome)
        books = handoff.books_of(books)
        self.books.owe(books)
        self.books.keep()
        if pushed != 0:
            # The ack left runs to the broker (or cannot say): lease now, as Acks.harvest
            # does after an ack of its own.
            self.ahead.wake(retry=True)
        continued = leased_of([lease for lease, _ in books.taken], self.config.using)
        if started:
            run = continued.pop(0)
            slot.queued.appendleft(InFlight(run.lease, run.task, run.timeout_s, began=at,
                                            deadline=at + run.timeout_s, seq=started,
                                            watched=True))
        else:
            slot.begin_head(at)
        if continued:
            # Continued without its task (not on PostgreSQL's lease statement): handed as
            # a run leased ahead.
            for leased in continued:
                leased.watched = True
            self.ahead.put_front(continued)
            self.allow()

    def take_pending(self, slot: Slot) -> bool:
        """If ``slot``'s run is one its child was acking, ack its outcome here instead
        (fenced: refused if the child's ack committed) and drop it from the slot."""
        current = slot.current
        if current is None or current.pending is None:
            return False
        outcome = current.pending
        if current.cancel_deadline != float("inf"):
            outcome = cancelled_outcome(current, [], "the handler stopped")
        self.acks.add(outcome)
        slot.pop_finished()
        return True

    def ack_pending_and_restart(self, slot: Slot, how: str) -> None:
        """``slot``'s child ``how`` (died, say) while acking its run: ack that run's
        success here, replace the child, and hand again the runs queued behind it (none
        had started: the child starts the next only after its ack's answer)."""
        log.warning("worker: the child acking run %s %s; acking it here",
                    slot.current.lease.run_id, how)
        self.take_pending(slot)
        self.ahead.requeue(self.children.restart(slot, head=False))
        self.allow()


def merge_books(owed: list[Books]) -> Books:
    """The Books of several acks, in order, as one: the broker forgets every finished
    run before it adopts every continued one, so a run one ack continued and a later
    one finished is left out of both (applied in order, its adoption and its forget
    would cancel out; merged, the forget would come first and the run stay leased)."""
    adopted: set[int] = set()
    ended: set[int] = set()
    finished, taken = [], []
    for books in owed:
        for slot in books.finished:
            if slot[0] in adopted:
                ended.add(slot[0])
            else:
                finished.append(slot)
        for lease, owner in books.taken:
            adopted.add(lease.run_id)
            taken.append((lease, owner))
    taken = [(lease, owner) for lease, owner in taken if lease.run_id not in ended]
    return Books(finished, taken, owed[-1].ttl_s, [r for b in owed for r in b.retried])
