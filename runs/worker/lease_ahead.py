"""Lease-ahead and take-back: how many runs the worker leases beyond its free children,
how it hands them to the children, and taking back the runs waiting behind one gone long
(docs/architecture.md, "runworker").

Batching (BENCHMARKS.md, "What we changed"): each lease is a database transaction plus a
Redis script, so runs that take a fraction of a millisecond are leased ahead. Runs are
leased ahead only while they are short (so a worker never sits on long runs another
worker could start).

How many: enough to keep the children busy while a lease is in flight (Little's law:
runs in flight = rate x latency; a lease of 150 runs takes 20-30 ms on a loaded 2-core
machine), never more than PREFETCH_WINDOW_S of average run time per child, so a worker
holds at most that much work another worker could have started.
"""

import json
import time
from concurrent.futures import Future
from dataclasses import dataclass

from runs.clock import to_us
from runs.daemon import TRANSIENT
from runs.models import Run
from runs.types import Lease
from runs.worker import wire
from runs.worker.acks import ACKS_IN_FLIGHT, UNACKED_MAX
from runs.worker.pool import InFlight, Slot

PREFETCH_PER_SLOT = 256  # most runs leased ahead per child process
PREFETCH_WINDOW_S = 0.05  # ... and at most this much average run time per child
PREFETCH_MAX_RUN_S = 0.02  # lease ahead only while runs take less than this on average
PIPELINE_DEPTH = 128  # most runs handed to one child at once while runs are short (Slot)
# Bytes of runs waiting in one child's pipe: below the 64 KiB pipe buffer, so a send never
# blocks the worker behind a run that turns out to be long.
PIPE_BUDGET = 32 * 1024
TASK_OVERHEAD = 200  # bytes of a pickled task besides its payload's JSON text
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


def lease_batch(concurrency: int) -> int:
    """Most runs one lease call takes for a worker of ``concurrency`` child processes
    whose runs are short (bench/ceiling.py uses the same batch)."""
    return concurrency * (1 + PREFETCH_PER_SLOT)


@dataclass
class Leased:
    """A run leased ahead, waiting in the worker for a free child. ``task`` is what the
    child needs (runs/worker/child.py), the payload as the JSON text the database gave: the
    child decodes it, so the worker does not decode and re-encode it per run."""

    lease: Lease
    task: dict
    timeout_s: int
    watched: bool = False  # known to be a workflow node's run (runs/continuation.py)


class LeaseAhead:
    """The worker's leasing: ask the lease lane for runs (lease_more), take its answers
    (harvest_lease), hand runs to the children (dispatch) and take back the runs waiting
    behind one gone long (take_back_stalled). A mixin of runs/worker/main.py's Worker,
    whose attributes it uses."""

    def prefetch(self) -> int:
        """Runs to lease beyond the free slots: none until runs are known to be short,
        then PREFETCH_WINDOW_S of average run time per child, at most PREFETCH_PER_SLOT."""
        if self.avg_run_s is None or self.avg_run_s > PREFETCH_MAX_RUN_S:
            return 0
        per_slot = PREFETCH_WINDOW_S / max(self.avg_run_s, 1e-6)
        return self.concurrency * max(1, min(PREFETCH_PER_SLOT, int(per_slot)))

    def depth(self) -> int:
        """Runs handed to one child at once: while runs are short, as many as its share
        of the lease-ahead (PREFETCH_WINDOW_S of average run time), at most
        PIPELINE_DEPTH; else one."""
        return max(1, min(PIPELINE_DEPTH, self.prefetch() // self.concurrency))

    def lease_more(self) -> None:
        """Ask the lease lane for runs when a child is idle or the runs leased ahead run
        low (up to LEASES_IN_FLIGHT calls at once); harvest_lease takes the answers."""
        self.dispatch()
        now = time.monotonic()
        if (self.stopping or len(self.leasing) >= LEASES_IN_FLIGHT
                or now < self.lease_paused_until or len(self.acking) > ACKS_IN_FLIGHT
                or self.acked_pending() > UNACKED_MAX):
            return
        if self.idle and self.wake_at is not None and now < self.wake_at:
            return
        asked = sum(want for _, want in self.leasing)
        held = len(self.ahead) + len(self.handed()) + asked
        empty = sum(1 for slot in self.slots if not slot.queued)
        want = self.concurrency + self.prefetch() - held
        # Lease when a child is idle and no lease is on its way, or top up the runs
        # leased ahead as soon as a lease's worth of room is free.
        if not (empty and not self.leasing) and want < max(1, self.prefetch() // LEASE_MIN_SHARE):
            return
        if self.max_runs is not None:
            want = min(want, self.max_runs - self.finished - self.acked_pending() - held)
        if want <= 0:
            return
        self.leasing.append((self.lanes.lease.submit(self.lease_call, want), want))

    def harvest_lease(self) -> None:
        """Take the lease lane's answers that have come: runs to hand to the children, or
        nothing (sleep until the next run falls due, at most WORKER_POLL_S), or an error
        (lease again in a second; runs in flight are still collected, acked and
        heartbeated meanwhile, or their leases would lapse and they would run twice)."""
        for entry in [e for e in self.leasing if e[0].done()]:
            self.leasing.remove(entry)
            self.take_lease(entry[0])

    def take_lease(self, future: Future) -> None:
        """Handle one finished lease call (harvest_lease)."""
        try:
            leased, due_in = future.result()
        except TRANSIENT as exc:
            self.note_failure("lease", exc)
            self.lease_paused_until = time.monotonic() + 1.0
            return
        self.idle = not leased
        if leased:
            self.ahead.extend(leased)
            self.dispatch()
            return
        if self.lease_again:
            # Sent before an ack that may have made runs (acks.py): lease again now.
            self.lease_again, self.wake_at = False, None
            return
        # Sleep until the next run falls due rather than a whole poll interval, so a run
        # scheduled for an instant starts within a few ms of it.
        wait_s = self.poll_s if due_in is None else min(due_in, self.poll_s)
        self.wake_at = time.monotonic() + wait_s

    def lease_call(self, want: int) -> tuple[list["Leased"], float | None]:
        """In the lease lane: lease up to ``want`` runs with what their children need;
        with none ready, also the seconds until the next falls due (None: unknown). With
        none ready on a broker that can wait (Broker.wait_ready), it first waits there
        for a push, as long as the worker would have slept, and leases once more; the
        seconds are then 0 (lease again now: the wait is done)."""
        leases = self.broker.lease(self.queues, want, self.worker_id, weights=self.weights)
        if leases:
            return self.leased_of(leases), None
        due_in = self.broker.next_due_s(self.queues)
        wait_s = self.poll_s if due_in is None else min(due_in, self.poll_s)
        # A burst worker does not wait: it stops once idle (main.py, round). Nor does a
        # worker whose next run falls due before the broker's wait could end for sure:
        # it sleeps to that instant itself (redis_wake.py, WAIT_SLACK_S).
        exact = due_in is not None and due_in < wait_s + self.broker.wait_slack_s
        if (self.stopping or self.burst or exact
                or not self.broker.wait_ready(self.queues, wait_s,
                                              passing_on=self.waits_end)):
            return [], due_in
        if self.waits_end():
            return [], 0.0
        leases = self.broker.lease(self.queues, want, self.worker_id, weights=self.weights)
        return self.leased_of(leases), None if leases else 0.0

    def waits_end(self) -> bool:
        """Whether an idle wait in the broker (Broker.wait_ready) is to end now: the
        worker is stopping, or its lease lane is pausing to fork a child (supervise.py,
        restart), which waits for the lane's calls. Asked from the lease lane."""
        return self.stopping or (self.lanes is not None and self.lanes.lease.stopping)

    def leased_of(self, leases: list[Lease]) -> list["Leased"]:
        """``leases`` with what their children need (the lease's own ``task`` where the
        lease statement returned it, else one read of the runs)."""
        missing = [lease.run_id for lease in leases if lease.task is None]
        runs = {
            # The task's form (start_attempts on PostgreSQL gives it): payload as JSON text.
            row[0]: {"scheduled_at_us": to_us(row[1]), "job_id": row[2], "handler": row[3],
                     "payload": json.dumps(row[4]), "timeout_s": row[5]}
            for row in Run.objects.using(self.using)
            .filter(pk__in=missing)
            .values_list("pk", "scheduled_at", "job_id", "job__handler", "job__payload",
                         "job__timeout_s")
        } if missing else {}
        leased = []
        for lease in leases:
            t = lease.task if lease.task is not None else runs[lease.run_id]
            leased.append(Leased(lease, wire.task_of(lease.run_id, lease.attempt, t),
                                 t["timeout_s"]))
        return leased

    def dispatch(self) -> None:
        """Hand runs leased ahead to the children, one per child in turn (oldest lease
        first), up to ``depth()`` each and PIPE_BUDGET bytes waiting per pipe; each
        child's share goes in one message."""
        if not self.ahead or self.stopping:
            return
        depth = self.depth()
        now = time.time_ns() // 1000  # the children's deadlines, in µs since the epoch
        mono = time.monotonic()
        batches: dict[Slot, list[dict]] = {}
        open_ = [slot for slot in self.slots
                 if len(slot.queued) < depth and not slot.stalled(mono)]
        while self.ahead and open_:
            for slot in list(open_):
                if not self.ahead:
                    break
                task = self.hand(slot, self.ahead[0], depth, now)
                if task is None:
                    open_.remove(slot)
                    continue
                self.ahead.popleft()
                batches.setdefault(slot, []).append(task)
        for slot, tasks in batches.items():
            try:
                slot.send(tasks)
            except OSError:
                # The child died (its last messages were read, the end of its pipe not
                # yet): collect() or enforce_deadlines() sees it, and the runs just
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

    def requeue(self, runs: list[InFlight]) -> None:
        """Runs a replaced child never started go back to the front of the queue."""
        for run in reversed(runs):
            self.ahead.appendleft(Leased(run.lease, run.task, run.timeout_s, run.watched))
        self.allow_child_acks()  # runs wait ahead now: no child may jump them

    def take_back_stalled(self) -> None:
        """Runs waiting behind a run gone long (STALL_S) go back to the front of the
        runs leased ahead, for the other children (dispatch skips the stalled child).
        When every child's run has gone long, they wait for the first to end: releasing
        them for other workers cost a release per run and churned (a worker alone
        leased them back at once; BENCHMARKS.md, "W2 against the ceiling")."""
        now = time.monotonic()
        back = [run for slot in self.slots if len(slot.queued) > 1 and slot.stalled(now)
                for run in slot.take_back()]
        if back:
            self.requeue(back)
            self.dispatch()

