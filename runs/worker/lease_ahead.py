"""Lease-ahead and take-back: how many runs the worker leases beyond its free children,
how it hands them to the children, and taking back the runs waiting behind one gone long
(docs/architecture.md, "runworker").

Batching (BENCHMARKS.md, "W2 against the ceiling"): each lease is a database transaction plus a
Redis script, so runs that take a fraction of a millisecond are leased ahead. Runs are
leased ahead only while they are short (so a worker never sits on long runs another
worker could start).

How many: enough to keep the children busy while a lease is in flight (Little's law:
runs in flight = rate x latency; a lease of 150 runs takes 20-30 ms on a loaded 2-core
machine), never more than PREFETCH_WINDOW_S of average run time per child, so a worker
holds at most that much work another worker could have started.
"""

import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future

from runs import tracing
from runs.clock import db_now, to_us
from runs.daemons.daemon import TRANSIENT
from runs.execution import leases as run_leases
from runs.models import Run
from runs.types import Lease
from runs.worker import wire
from runs.worker.ahead import TASK_OVERHEAD, Ahead, Leased
from runs.worker.async_hand import AsyncRoom, hand_async
from runs.worker.pool import InFlight, Slot
from scheduler_core.registry import is_async

PREFETCH_PER_SLOT = 256  # most runs leased ahead per child process
PREFETCH_WINDOW_S = 0.05  # ... and at most this much average run time per child
PREFETCH_MAX_RUN_S = 0.02  # lease ahead only while runs take less than this on average
PIPELINE_DEPTH = 128  # most runs handed to one child at once while runs are short (Slot)
# Bytes of runs waiting in one child's pipe: below the 64 KiB pipe buffer, so a send never
# blocks the worker behind a run that turns out to be long.
PIPE_BUDGET = 32 * 1024
# Lease calls in flight at once (threads of the lease lane), and the smallest lease worth
# a call: 1/LEASE_MIN_SHARE of the lease-ahead. Measured (BENCHMARKS.md, "W2"): with one
# lease at a time the children sat idle waiting for it 70% of a drain of short runs.
LEASES_IN_FLIGHT = 2
# Each lease statement has a fixed cost (planning, the Redis script, a round trip): a
# lease once a third of the room is free, not an eighth, made a 20,000-run drain's 125
# leases of 160 runs into about 90 of 220, for 3-4% more runs per CPU second. Doubling
# PREFETCH_PER_SLOT gained about 1% more but doubled what a worker holds: the short runs
# stranded while its children are all in long runs, the wait of a high-priority run, and
# what a stopping worker releases (BENCHMARKS.md, "W2 against the ceiling").
LEASE_MIN_SHARE = 3
# An idle worker whose next run falls due within its poll sleeps to that instant in the
# lease lane (LeaseAhead.lease_at): it stops listening for pushes EXACT_S before it, and
# checks every EXACT_SLICE_S whether it is stopping.
EXACT_S = 0.002
EXACT_SLICE_S = 0.05
# ... and on PostgreSQL leases it EARLY_S before it, which covers a lease's round trips
# and the hand to a child: the child starts the run at its run_at (W3 in
# docs/performance.md; at most runs/execution/leases.py's EARLY_MAX_S).
EARLY_S = 0.01

log = logging.getLogger("scheduler.worker")


def lease_batch(concurrency: int) -> int:
    """Most runs one lease call takes for a worker of ``concurrency`` child processes
    whose runs are short (bench/ceiling.py uses the same batch)."""
    return concurrency * (1 + PREFETCH_PER_SLOT)


def leased_of(leases: list[Lease], using: str) -> list[Leased]:
    """``leases`` with what their children need (the lease's own ``task`` where the lease
    statement returned it, else one read of the runs in database ``using``)."""
    missing = [lease.run_id for lease in leases if lease.task is None]
    runs = {
        # The task's form (start_attempts on PostgreSQL gives it): payload as JSON text.
        row[0]: {"scheduled_at_us": to_us(row[1]), "job_id": row[2], "handler": row[3],
                 "payload": json.dumps(row[4]), "timeout_s": row[5],
                 "max_attempts": row[6], "retry": row[7], "trace": row[8]}
        for row in Run.objects.using(using)
        .filter(pk__in=missing)
        .values_list("pk", "scheduled_at", "job_id", "job__handler", "job__payload",
                     "job__timeout_s", "job__max_attempts", "job__retry", "trace_context")
    } if missing else {}
    leased = []
    for lease in leases:
        t = lease.task if lease.task is not None else runs[lease.run_id]
        leased.append(Leased(lease, wire.task_of(lease.run_id, lease.attempt, t),
                             t["timeout_s"], is_async=is_async(t["handler"])))
    if leased and tracing.on():
        tracing.fill([run.task for run in leased], using)  # a workflow's, say
    return leased


class LeaseAhead:
    """The worker's leasing: ask the lease lane for runs (lease_more), take its answers
    (harvest), hand runs to the children (dispatch) and take back the runs waiting behind
    one gone long (take_back_stalled). Owns the lease calls in flight (``leasing``, each
    with the runs it asked for) and the pause after a failed one. Fills ``ahead``, feeds
    ``children``; asks ``acks`` whether acks are backed up. Called by the Worker's round
    and the supervisor (dispatch)."""

    def __init__(self, config, broker, lanes, ahead: Ahead, children, acks, child_acks,
                 stopping: Callable[[], bool], note_failure: Callable):
        self.config = config
        self.broker = broker
        self.lanes = lanes
        self.ahead = ahead
        self.children = children
        self.acks = acks
        self.child_acks = child_acks
        self.stopping = stopping
        self.note_failure = note_failure
        self.leasing: list[tuple[Future, int]] = []
        self.paused_until = 0.0
        self.async_room = AsyncRoom()  # room for the children's event loops

    def busy(self) -> bool:
        """Whether a lease call is in flight."""
        return bool(self.leasing)

    def sleeping_until(self) -> float | None:
        """time.monotonic() of the next lease while none is in flight: the idle wake-up,
        and never before a failed lease's pause ends (an idle worker's wake-up has passed
        by then: waiting for it, the loop spun for the whole pause, each pause of an
        outage); None: now, or a lease is in flight."""
        if self.leasing:
            return None
        wake_at = self.ahead.sleeping_until()
        if self.paused_until > time.monotonic():
            return self.paused_until if wake_at is None else max(wake_at, self.paused_until)
        return wake_at

    def prefetch(self) -> int:
        """Runs to lease beyond the free slots: none until runs are known to be short,
        then PREFETCH_WINDOW_S of average run time per child, at most PREFETCH_PER_SLOT."""
        avg_run_s = self.children.avg_run_s
        if avg_run_s is None or avg_run_s > PREFETCH_MAX_RUN_S:
            return 0
        per_slot = PREFETCH_WINDOW_S / max(avg_run_s, 1e-6)
        return self.config.concurrency * max(1, min(PREFETCH_PER_SLOT, int(per_slot)))

    def depth(self) -> int:
        """Runs handed to one child at once: while runs are short, as many as its share
        of the lease-ahead (PREFETCH_WINDOW_S of average run time), at most
        PIPELINE_DEPTH; else one."""
        return max(1, min(PIPELINE_DEPTH, self.prefetch() // self.config.concurrency))

    def lease_more(self) -> None:
        """Ask the lease lane for runs when a child is idle or the runs leased ahead run
        low (up to LEASES_IN_FLIGHT calls at once); harvest takes the answers."""
        self.dispatch()
        now = time.monotonic()
        if (self.stopping() or len(self.leasing) >= LEASES_IN_FLIGHT
                or now < self.paused_until or self.acks.backed_up()):
            return
        if self.ahead.asleep(now):
            return
        asked = sum(want for _, want in self.leasing)
        held = len(self.ahead) + len(self.children.handed()) + asked
        room = self.async_room.room(self.config.concurrency, self.config.async_per_child)
        want = self.config.concurrency + self.prefetch() + room - held
        # Lease when a child is idle and no lease is on its way, or top up the runs
        # leased ahead as soon as a lease's worth of room is free; never for the async
        # room while sync runs already wait here (async_hand.py).
        if (not (self.children.empty() and not self.leasing)
                and want < max(1, (self.prefetch() + room) // LEASE_MIN_SHARE)
                or room and len(self.ahead.runs) > self.config.concurrency + self.prefetch()):
            return
        if self.config.max_runs is not None:
            want = min(want, self.config.max_runs - self.acks.settled() - held)
        if want <= 0:
            return
        self.leasing.append((self.lanes.lease.submit(self.lease_call, want), want))

    def harvest(self) -> None:
        """Take the lease lane's answers that have come: runs to hand to the children, or
        nothing (sleep until the next run falls due, at most WORKER_POLL_S), or an error
        (lease again in a second; runs in flight are still collected, acked and
        heartbeated meanwhile, or their leases would lapse and they would run twice)."""
        for entry in [e for e in self.leasing if e[0].done()]:
            self.leasing.remove(entry)
            self.take_lease(entry[0])

    def take_lease(self, future: Future) -> None:
        """Handle one finished lease call (harvest)."""
        try:
            leased, due_in = future.result()
        except TRANSIENT as exc:
            self.note_failure("lease", exc)
            self.paused_until = time.monotonic() + 1.0
            return
        self.async_room.note(leased)
        self.ahead.leased(leased, due_in, self.config.poll_s)
        if leased:
            self.dispatch()

    def wait(self) -> None:
        """Wait for the lease calls in flight and take their runs (at the stop: they are
        released then)."""
        for future, _ in self.leasing:
            future.exception()
        self.harvest()

    def lease_call(self, want: int) -> tuple[list[Leased], float | None]:
        """In the lease lane: lease up to ``want`` runs with what their children need;
        with none ready, also the seconds until the next falls due (None: unknown). With
        none ready on a broker that can wait (Broker.wait_ready), it first waits there
        for a push, as long as the worker would have slept, and leases once more; the
        seconds are then 0 (lease again now: the wait is done)."""
        c = self.config
        self.ahead.nudge.clear()  # before the lease: a nudge after it is heard (lease_at)
        leased, _ = self.lease_now(want)
        if leased:
            return leased, None
        due_in = self.broker.next_due_s(c.queues)
        # A burst worker does not wait: it stops once idle (main.py, round).
        if self.stopping() or c.burst:
            return [], due_in
        if due_in is not None and due_in < c.poll_s + self.broker.wait_slack_s:
            return self.lease_at(time.monotonic() + due_in, want)
        if not self.broker.wait_ready(c.queues, c.poll_s, passing_on=self.waits_end):
            return [], due_in
        if self.waits_end():
            return [], 0.0
        return self.lease_now(want)

    def lease_at(self, due_at: float, want: int) -> tuple[list[Leased], float | None]:
        """In the lease lane: lease up to ``want`` runs at ``due_at`` (time.monotonic()),
        when the next run falls due; earlier if a push wakes the broker's wait first, or
        an ack may have made runs (Ahead.nudge).

        The wait for a push ends the broker's wait_slack_s plus EXACT_S before the lease;
        the lane sleeps the rest (the worker loop's select() woke a millisecond or two
        late). On PostgreSQL it leases EARLY_S before the run's time, and the child waits
        for that time (runs/worker/child.py, not_yet_s). W3, docs/performance.md."""
        c = self.config
        early_s = EARLY_S if run_leases.one_statement(c.using) else 0.0
        listen_s = due_at - early_s - time.monotonic() - self.broker.wait_slack_s - EXACT_S
        if listen_s > 0 and self.broker.wait_ready(c.queues, listen_s,
                                                   passing_on=self.waits_end):
            if self.waits_end():
                return [], 0.0
            if time.monotonic() < due_at - early_s - EXACT_S:
                # A push woke it: a run ready now, or the wake token left by the push of
                # the very run it waits for (runs/brokers/redis/wake.py), which is not
                # due yet; then it sleeps on, to the earlier of the two runs' times.
                leased, again = self.lease_now(want)
                if leased:
                    return leased, again
                due_in = self.broker.next_due_s(c.queues)
                if due_in is not None:
                    due_at = min(due_at, time.monotonic() + due_in)
        if not self.sleep_until(due_at - early_s):
            return [], 0.0
        if early_s and not self.ahead.nudge.is_set():
            leased, again = self.lease_early(want, early_s)
            # Nothing, though the run fell due within the promote: a run held back by a
            # rate limit (lease.lua defers it to its token's time) is leased at its time,
            # not promoted again and again meanwhile.
            if leased or not self.sleep_until(due_at):
                return leased, again
        return self.lease_now(want)

    def lease_early(self, want: int, early_s: float) -> tuple[list[Leased], float | None]:
        """In the lease lane: promote the runs due within twice ``early_s`` seconds and
        lease up to ``want``. The promote is only a head start: failing, it is logged and
        the lease goes on (the runs are leased once due)."""
        try:
            self.broker.promote(queues=self.config.queues, within_s=2 * early_s)
            # A lease's not_before errs late by its reply, commit included (a ms, more
            # at a slow fsync); a bound on the clocks' offset from a round trip with no
            # commit narrows it, still never early whatever the skew.
            offset_s = db_now(self.config.using).timestamp() - time.time()
        except TRANSIENT as exc:
            log.debug("worker %s: early promote failed: %s", self.config.worker_id, exc)
            offset_s = None
        leased, again = self.lease_now(want)
        for run in leased if offset_s is not None else ():
            at_us = run.lease.task.get("run_at_us") if run.lease.task else None
            if at_us and run.task.get("not_before"):
                run.task["not_before"] = min(run.task["not_before"], at_us / 1e6 - offset_s)
        return leased, again

    def sleep_until(self, instant: float) -> bool:
        """In the lease lane: sleep until ``instant`` (time.monotonic()) or a nudge
        (Ahead.nudge); False if the worker is stopping (asked every EXACT_SLICE_S)."""
        while (left := instant - time.monotonic()) > 0:
            if self.waits_end():
                return False
            if self.ahead.nudge.wait(min(left, EXACT_SLICE_S)):
                return True
        return not self.waits_end()

    def lease_now(self, want: int) -> tuple[list[Leased], float | None]:
        """In the lease lane: lease up to ``want`` runs; with none, lease again at once
        (0.0: a wait or a sleep just ended, the broker found nothing since)."""
        c = self.config
        began_ns = time.time_ns()
        leases = self.broker.lease(c.queues, want, c.worker_id, weights=c.weights)
        return self.traced(leased_of(leases, c.using), began_ns), None if leases else 0.0

    def traced(self, leased: list[Leased], began_ns: int) -> list[Leased]:
        """``leased``, with their lease spans recorded when tracing is on (runs/tracing.py;
        ``began_ns``: the lease call's start, ns since the epoch)."""
        if leased and tracing.on():
            tracing.leased([run.task for run in leased], self.config.worker_id, began_ns)
        return leased

    def waits_end(self) -> bool:
        """Whether an idle wait in the broker (Broker.wait_ready) is to end now: the
        worker is stopping, or its lease lane is pausing to fork a child
        (Children.restart), which waits for the lane's calls. Asked from the lease lane."""
        return self.stopping() or self.lanes.lease.stopping

    def release_ahead(self) -> None:
        """Stopping: runs leased ahead go back at once instead of being started."""
        leases = [leased.lease for leased in self.ahead.take_all()]
        released = self.broker.release(leases)
        log.info("worker %s: released %d runs leased ahead", self.config.worker_id,
                 len(released))

    def dispatch(self) -> None:
        """Hand runs leased ahead to the children, one per child in turn (oldest lease
        first), up to ``depth()`` each and PIPE_BUDGET bytes waiting per pipe; each
        child's share goes in one message."""
        if not self.ahead or self.stopping():
            return
        hand_async(self.ahead, self.children.slots, self.config.async_per_child)
        depth = self.depth()
        now = time.time_ns() // 1000  # the children's deadlines, in µs since the epoch
        mono = time.monotonic()
        batches: dict[Slot, list[dict]] = {}
        open_ = [slot for slot in self.children.slots
                 if len(slot.queued) < depth and not slot.stalled(mono)]
        while self.ahead.runs and open_:
            for slot in list(open_):
                if not self.ahead.runs:
                    break
                task = self.hand(slot, self.ahead.first(), depth, now)
                if task is None:
                    open_.remove(slot)
                    continue
                self.ahead.pop_first()
                batches.setdefault(slot, []).append(task)
        for slot, tasks in batches.items():
            try:
                slot.send(tasks)
            except OSError:
                # The child died (its last messages were read, the end of its pipe not
                # yet): the supervisor's collect or enforce_deadlines sees it, and the runs just
                # queued on it go back to be handed again.
                pass

    def hand(self, slot: Slot, leased: Leased, depth: int, now: int) -> dict | None:
        """Queue ``leased`` on ``slot`` and return the task its child is to be sent, or
        None (nothing queued) when the slot holds ``depth`` runs, is full (Slot.full:
        recycling) or runs already wait in its pipe and this one would take it past
        PIPE_BUDGET."""
        if len(slot.queued) >= depth or slot.full:
            return None
        size = TASK_OVERHEAD + len(leased.task["payload"])
        # A child that has runs gets no more than PIPE_BUDGET bytes waiting: a send must
        # never block the worker behind a stuck run, nor while the child is blocked on
        # sending a big result. A run of any size goes to an idle child.
        if slot.queued and slot.waiting + size > PIPE_BUDGET:
            return None
        seq = slot.next_seq()
        if seq is None:
            # Its child died holding its lock (replaced: enforce_deadlines), or started
            # the last run of its budget itself (recycle.py).
            return None
        task = {**leased.task, "deadline": now + leased.timeout_s * 1_000_000, "seq": seq}
        if leased.watched:
            # Its child may ack it itself (runs/worker/handoff.py).
            task.update(watched=True, queue=leased.lease.queue, shard=leased.lease.shard)
        slot.queued.append(InFlight(leased.lease, leased.task, leased.timeout_s, size=size,
                                    seq=seq, watched=leased.watched))
        slot.waiting += size
        if len(slot.queued) == 1:
            slot.begin_head(time.monotonic())
        return task

    def take_back_stalled(self) -> None:
        """Runs waiting behind a run gone long (STALL_S) go back to the front of the
        runs leased ahead, for the other children (dispatch skips the stalled child).
        When every child's run has gone long, they wait for the first to end: releasing
        them for other workers cost a release per run and churned (a worker alone
        leased them back at once; BENCHMARKS.md, "W2 against the ceiling")."""
        now = time.monotonic()
        back = [run for slot in self.children.slots if len(slot.queued) > 1 and slot.stalled(now)
                for run in slot.take_back()]
        if back:
            self.ahead.requeue(back)
            self.child_acks.allow()  # runs wait ahead now: no child may jump them
            self.dispatch()

