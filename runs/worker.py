"""The worker daemon (``runworker``): lease runs, execute them in child processes with a
timeout, heartbeat, ack (fenced) (DESIGN.md, "Processes").

The worker process holds every database and broker connection and ``concurrency`` child
processes (runs/executor.py) that only run handler code, one run each at a time. That is
what lets the worker enforce ``timeout_s`` on a handler stuck in a busy loop (it kills the
child, records the attempt as timed out and starts a new child) and survive a handler that
kills its own process (recorded as crashed). Its leases and acks run in two background
lanes (runs/lanes.py), so neither waits for the other and the children are fed meanwhile.

SIGTERM: stop leasing, let in-flight runs finish for up to WORKER_GRACE_S, release the
rest at once (they go straight back to ready), exit 0. A second SIGTERM releases
everything in flight immediately.
"""

import json
import multiprocessing
import os
import pickle
import signal
import socket
import struct
import time
import uuid
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from multiprocessing.connection import wait

from django.db import DataError, connections

from jobs import conf
from runs.brokers import get_broker
from runs.clock import db_now, to_us
from runs.daemon import TRANSIENT, Daemon
from runs.executor import child_main, dropped_note
from runs.lanes import Lanes
from runs.models import AttemptOutcome, Run, WorkerProcess
from runs.types import Lease, Outcome

FORK = multiprocessing.get_context("fork")

# Batching (BENCHMARKS.md, "What we changed"): each lease and each ack is a database
# transaction plus a Redis script, so runs that take a fraction of a millisecond are
# leased ahead and acked in batches. Runs are leased ahead only while they are short (so a
# worker never sits on long runs another worker could start). Acks batch themselves: an
# outcome goes to the ack lane at once when the lane is idle, else waits for the ack in
# flight to commit and goes with every outcome collected meanwhile (group commit). So a
# lone run is acked without delay, and under load each ack carries what one ack's latency
# gathered, instead of queueing small batches behind each other (BENCHMARKS.md, "W2").
#
# How many: enough to keep the children busy while a lease is in flight (Little's law:
# runs in flight = rate x latency; a lease of 150 runs takes 20-30 ms on a loaded 2-core
# machine), never more than PREFETCH_WINDOW_S of average run time per child, so a worker
# holds at most that much work another worker could have started.
PREFETCH_PER_SLOT = 256  # most runs leased ahead per child process
PREFETCH_WINDOW_S = 0.05  # ... and at most this much average run time per child
PREFETCH_MAX_RUN_S = 0.02  # lease ahead only while runs take less than this on average
PIPELINE_DEPTH = 128  # most runs handed to one child at once while runs are short (Slot)
# Bytes of runs waiting in one child's pipe: below the 64 KiB pipe buffer, so a send never
# blocks the worker behind a run that turns out to be long.
PIPE_BUDGET = 32 * 1024
TASK_OVERHEAD = 200  # bytes of a pickled task besides its payload's JSON text
ACK_BATCH_MAX = 512  # most outcomes in one ack: beyond, another ack is queued in the lane
# Ack batches submitted and not yet committed beyond which the worker leases no more: if
# the database falls behind, runs wait in the broker, not in this process. The same holds
# for outcomes waiting to be acked (acks failing, or slower than the children).
ACKS_IN_FLIGHT = 2
UNACKED_MAX = ACK_BATCH_MAX * (ACKS_IN_FLIGHT + 1)
# What an outcome the database or the JSON encoder cannot take raises: acked alone, then
# recorded as a failure (e.g. an int result longer than json.dumps allows).
POISON = (DataError, ValueError, TypeError)
# Lease calls in flight at once (threads of the lease lane), and the smallest lease worth
# a call: 1/LEASE_MIN_SHARE of the lease-ahead. Measured (BENCHMARKS.md, "W2"): with one
# lease at a time the children sat idle waiting for it 70% of a drain of short runs.
LEASES_IN_FLIGHT = 2
# Each lease statement has a fixed cost (planning, the Redis script, a round trip): a
# lease once a third of the room is free, not an eighth, made a 20,000-run drain's 125
# leases of 160 runs into about 90 of 220, for 3-4% more runs per CPU second. Doubling
# PREFETCH_PER_SLOT gained about 1% more but doubled what a worker holds: the short runs
# stranded while its children are all in long runs, the wait of a high-priority run, and
# what a stopping worker releases (BENCHMARKS.md, "sixth look").
LEASE_MIN_SHARE = 3
# A run that has been executing this long has gone long (runs are handed several at once
# only while they average under PREFETCH_MAX_RUN_S): the runs waiting behind it in its
# child are taken back for the other children, and its child gets no more until it ends.
# So a short run waits at most about this long behind a long one (docs/architecture.md).
STALL_S = 0.1


def lease_batch(concurrency: int) -> int:
    """Most runs one lease call takes for a worker of ``concurrency`` child processes
    whose runs are short (bench/ceiling.py uses the same batch)."""
    return concurrency * (1 + PREFETCH_PER_SLOT)


@dataclass
class InFlight:
    """A run handed to a child. Only the head of a slot's queue is executing: its
    ``deadline`` (time.monotonic()) is set when it starts; the others wait in the pipe."""

    lease: Lease
    task: dict
    timeout_s: int
    deadline: float = float("inf")
    lost: bool = False
    began: float = 0.0  # time.monotonic() when the child started it
    size: int = 0  # bytes of the pickled task in the pipe
    seq: int = 0  # the task's number in its child's stream (Slot.take_back)
    logs: list | None = None  # lines the child streamed while it ran (executor.py)
    dropped: int = 0  # lines the cap dropped, as last streamed


@dataclass
class Leased:
    """A run leased ahead, waiting in the worker for a free child. ``task`` is what the
    child needs (runs/executor.py), the payload as the JSON text the database gave: the
    child decodes it, so the worker does not decode and re-encode it per run."""

    lease: Lease
    task: dict
    timeout_s: int


class Slot:
    """One child process and the runs handed to it, in order: the first is executing,
    the rest wait in the pipe. Handing a child several short runs at once keeps it busy
    while the worker is in a lease or ack transaction (BENCHMARKS.md, "What we changed");
    long runs go one at a time, so a child never sits on runs another worker could start.
    """

    def __init__(self):
        self.queued: deque[InFlight] = deque()
        self.waiting = 0  # bytes of the runs queued behind the head (estimated)
        self.seq = 0  # number of the last task handed to the child
        self.start()

    @property
    def current(self) -> InFlight | None:
        """The run the child is executing, if any."""
        return self.queued[0] if self.queued else None

    def begin_head(self, at: float) -> None:
        """The head of the queue started at ``at`` (time.monotonic()): arm its deadline."""
        if self.queued:
            head = self.queued[0]
            self.waiting -= head.size
            head.began = at
            head.deadline = at + head.timeout_s

    def stalled(self, now: float) -> bool:
        """Whether the run executing has gone long: running over STALL_S at ``now``
        (time.monotonic()), and the child has started nothing after it (a worker busy
        elsewhere may not have read the child's replies yet)."""
        return (bool(self.queued) and now - self.queued[0].began > STALL_S
                and self.control[0] <= self.queued[0].seq)

    def start(self) -> None:
        parent, child = FORK.Pipe()
        # Shared with the child, new for each one (a child killed holding the lock takes
        # it along): [number of the task it last started, number up to which it must
        # skip tasks], read and written under the lock (executor.py, take_task).
        self.lock = FORK.Lock()
        self.control = FORK.RawArray("q", 2)
        self.process = FORK.Process(target=child_main, args=(child, self.control, self.lock),
                                    daemon=True)
        self.process.start()
        child.close()
        self.conn = parent
        self.received = bytearray()

    def send(self, tasks: list[dict]) -> None:
        """Send ``tasks`` (runs in order) to the child as one message."""
        self.conn.send_bytes(pickle.dumps(tasks, pickle.HIGHEST_PROTOCOL))

    def receive(self) -> list[tuple]:
        """The messages the child has sent so far, read with one system call (a busy
        worker reads dozens at once; Connection.recv costs three calls each). Raises
        EOFError once the child is gone. Messages are framed as Connection.send_bytes
        frames them: a 4-byte big-endian length, then the pickle."""
        chunk = os.read(self.conn.fileno(), 1 << 16)
        if not chunk:
            raise EOFError
        self.received += chunk
        messages, at = [], 0
        while len(self.received) - at >= 4:
            (size,) = struct.unpack_from("!i", self.received, at)
            if len(self.received) - at - 4 < size:
                break
            messages.append(pickle.loads(self.received[at + 4:at + 4 + size]))
            at += 4 + size
        del self.received[:at]
        return messages

    def halt(self) -> list[tuple]:
        """SIGKILL the child; returns the messages it sent before it died, unread until
        now. The pipe stays open (kill closes it)."""
        if self.process.is_alive():
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.join(5)
        messages: list[tuple] = []
        try:
            while True:
                messages += self.receive()
        except (EOFError, OSError):
            return messages

    def take_back(self) -> list[InFlight]:
        """Take back the runs handed to the child that it has not started: it will skip
        them. Returns them in order ([] if the lock cannot be had: a child killed holding
        it is replaced anyway). The lock makes it exact: the child either started a run
        before, and it stays, or sees it is to be skipped."""
        if not self.lock.acquire(timeout=0.1):
            return []
        try:
            started = self.control[0]
            self.control[1] = self.seq
        finally:
            self.lock.release()
        back = [run for run in self.queued if run.seq > started]
        head = self.queued[0] if self.queued else None
        for run in back:
            self.queued.remove(run)
            if run is not head:  # begin_head took the head's size off already
                self.waiting -= run.size
        return back

    def kill(self) -> None:
        if self.process.is_alive():
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.join(5)
        self.conn.close()

    def restart(self) -> list[InFlight]:
        """Replace the child; returns the runs handed to it that it had not started."""
        self.kill()
        waiting = list(self.queued)[1:]
        self.queued.clear()
        self.waiting = 0
        self.start()
        return waiting


class Worker(Daemon):
    """Run leased runs of ``queues`` in ``concurrency`` child processes.

    ``max_runs`` stops the worker after that many finished runs; ``burst`` stops it once
    nothing is ready and nothing is in flight (both make the daemon testable).
    ``weights`` (queue -> positive int) splits lease capacity between the queues by weight
    (Broker.lease); without it the queues are served in the order given.
    """

    name = "worker"

    def __init__(self, queues: list[str], concurrency: int = 2, using: str = "default",
                 max_runs: int | None = None, burst: bool = False,
                 grace_s: float | None = None, weights: dict[str, int] | None = None):
        super().__init__(using)
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.queues = queues
        self.weights = weights
        self.concurrency = concurrency
        self.max_runs = max_runs
        self.burst = burst
        self.grace_s = conf.get("WORKER_GRACE_S") if grace_s is None else grace_s
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.broker = get_broker(using)
        self.poll_s = conf.get("WORKER_POLL_S")
        self.heartbeat_s = conf.heartbeat_interval()
        self.slots: list[Slot] = []
        self.outcomes: list[Outcome] = []
        self.ahead: deque[Leased] = deque()
        self.avg_run_s: float | None = None  # moving average of handler wall time
        self.finished = 0
        self.last_heartbeat = time.monotonic()
        self.stop_requested_at: float | None = None
        self.idle = False
        self.wake_at: float | None = None  # time.monotonic() when the next run falls due
        self.lease_paused_until = 0.0
        self.ack_paused_until = 0.0
        self.lanes: Lanes | None = None
        # Lease calls in the lease lane not yet harvested, with the runs each asked for.
        self.leasing: list[tuple[Future, int]] = []
        self.acking: list[tuple[Future, list[Outcome]]] = []  # ack calls in the ack lane

    # --- lifecycle --------------------------------------------------------------------

    def serve(self, max_rounds: int | None = None) -> None:
        # Children must not inherit open database sockets.
        connections.close_all()
        self.slots = [Slot() for _ in range(self.concurrency)]
        self.lanes = Lanes(lease_threads=LEASES_IN_FLIGHT)
        self.register()
        self.log.info("worker %s: %d slots on queues %s", self.worker_id, self.concurrency,
                      ",".join(self.queues))
        try:
            super().serve(max_rounds)
        finally:
            # Children ignore SIGTERM (executor.py); on an unexpected error the worker
            # must not hang at exit waiting for them.
            for slot in self.slots:
                slot.kill()
            self.lanes.close()

    def request_stop(self, signum=None, frame=None) -> None:
        if self.stop_requested_at is None:
            self.stop_requested_at = time.monotonic()
        super().request_stop(signum, frame)

    def keep_going(self) -> bool:
        if self.forced:
            return False
        if not self.stopping:
            return True
        in_grace = time.monotonic() - (self.stop_requested_at or 0) < self.grace_s
        return bool((self.in_flight() or self.outcomes or self.ahead or self.acking
                     or self.leasing) and in_grace)

    def in_flight(self) -> list[Slot]:
        """Slots whose child has runs."""
        return [slot for slot in self.slots if slot.queued]

    def handed(self) -> list[InFlight]:
        """Every run handed to a child and not finished."""
        return [run for slot in self.slots for run in slot.queued]

    def shutdown(self) -> None:
        for future, _ in self.leasing:
            future.exception()  # wait: their runs are released below
        self.harvest_lease()
        # Stop the children before deciding what to release: a run that finishes between
        # the release and the kill would have run to its end yet be recorded released.
        # What they finished before dying is in their pipes, and is acked.
        for slot in self.slots:
            for message in slot.halt():
                self.handle_message(slot, message)
        self.flush(force=True)
        for future, _ in self.acking:
            future.exception()
        self.harvest_acks()
        if self.outcomes:
            # The ack lane failed (database down?): one last try, whose error serve() logs.
            self.broker.complete(self.outcomes)
            self.outcomes = []
        busy = [run.lease for run in self.handed() if not run.lost]
        busy += [leased.lease for leased in self.ahead]
        self.ahead.clear()
        if busy:
            released = self.broker.release(busy)
            self.log.info("worker %s: released %d in-flight runs", self.worker_id, len(released))
        for slot in self.slots:
            slot.kill()
        WorkerProcess.objects.using(self.using).filter(worker_id=self.worker_id).update(
            stopped_at=db_now(self.using))

    def register(self) -> None:
        """Record this worker (and refresh its heartbeat) for operators."""
        now = db_now(self.using)
        WorkerProcess.objects.using(self.using).update_or_create(
            worker_id=self.worker_id,
            defaults={"last_heartbeat_at": now},
            create_defaults={
                "hostname": socket.gethostname(), "pid": os.getpid(), "queues": self.queues,
                "concurrency": self.concurrency, "started_at": now, "last_heartbeat_at": now,
            },
        )

    # --- one round --------------------------------------------------------------------

    def round(self) -> bool:
        self.harvest_lease()
        self.harvest_acks()
        if self.stopping and self.ahead:
            self.release_ahead()
        self.lease_more()
        self.collect(self.wait_timeout())
        self.enforce_deadlines()
        self.take_back_stalled()
        self.flush()
        self.heartbeat_if_due()
        if (self.burst and self.idle and not self.in_flight() and not self.outcomes
                and not self.ahead and not self.acking and not self.leasing):
            self.stopping = True
        if self.max_runs is not None and self.finished >= self.max_runs:
            self.stopping = True
        return True

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

    def acked_pending(self) -> int:
        """Outcomes collected and not yet committed."""
        return len(self.outcomes) + sum(len(batch) for _, batch in self.acking)

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
        # Sleep until the next run falls due rather than a whole poll interval, so a run
        # scheduled for an instant starts within a few ms of it.
        wait_s = self.poll_s if due_in is None else min(due_in, self.poll_s)
        self.wake_at = time.monotonic() + wait_s

    def lease_call(self, want: int) -> tuple[list["Leased"], float | None]:
        """In the lease lane: lease up to ``want`` runs with what their children need;
        with none ready, also the seconds until the next falls due (None: unknown)."""
        leases = self.broker.lease(self.queues, want, self.worker_id, weights=self.weights)
        if not leases:
            return [], self.broker.next_due_s(self.queues)
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
            leased.append(Leased(lease, {
                "run_id": lease.run_id, "job_id": t["job_id"], "attempt": lease.attempt,
                "scheduled_at": t["scheduled_at_us"], "handler": t["handler"],
                "payload": t["payload"],
            }, t["timeout_s"]))
        return leased, None

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
        None (nothing queued) when the slot holds ``depth`` runs or runs already wait in
        its pipe and this one would take it past PIPE_BUDGET."""
        if len(slot.queued) >= depth:
            return None
        size = TASK_OVERHEAD + len(leased.task["payload"])
        # A child that has runs gets no more than PIPE_BUDGET bytes waiting: a send must
        # never block the worker behind a stuck run, nor while the child is blocked on
        # sending a big result. A run of any size goes to an idle child.
        if slot.queued and slot.waiting + size > PIPE_BUDGET:
            return None
        slot.seq += 1
        task = {**leased.task, "deadline": now + leased.timeout_s * 1_000_000,
                "seq": slot.seq}
        slot.queued.append(InFlight(leased.lease, leased.task, leased.timeout_s, size=size,
                                    seq=slot.seq))
        slot.waiting += size
        if len(slot.queued) == 1:
            slot.begin_head(time.monotonic())
        return task

    def requeue(self, runs: list[InFlight]) -> None:
        """Runs a replaced child never started go back to the front of the queue."""
        for run in reversed(runs):
            self.ahead.appendleft(Leased(run.lease, run.task, run.timeout_s))

    def release_ahead(self) -> None:
        """Stopping: runs leased ahead go back at once instead of being started."""
        leases = [leased.lease for leased in self.ahead]
        self.ahead.clear()
        released = self.broker.release(leases)
        self.log.info("worker %s: released %d runs leased ahead", self.worker_id,
                      len(released))

    def wait_timeout(self) -> float:
        """Seconds to wait for a child or a lane: short while a slot is free (so leasing
        resumes soon), never past the nearest deadline, nor past the moment a run with
        others waiting behind it goes long (take_back_stalled)."""
        busy = self.in_flight()
        timeout = self.poll_s if len(busy) < len(self.slots) else 0.5
        if self.idle and self.wake_at is not None and not self.leasing:
            timeout = min(timeout, self.wake_at - time.monotonic())
        if busy:
            now = time.monotonic()
            timeout = min(timeout, min(s.current.deadline for s in busy) - now)
            stalls = [wait for s in busy
                      if len(s.queued) > 1 and (wait := s.current.began + STALL_S - now) > 0]
            timeout = min([timeout, *stalls])
        return max(0.0, timeout)

    def take_back_stalled(self) -> None:
        """Runs waiting behind a run gone long (STALL_S) go back to the front of the
        runs leased ahead, for the other children (dispatch skips the stalled child).
        When every child's run has gone long, they wait for the first to end: releasing
        them for other workers cost a release per run and churned (a worker alone
        leased them back at once; BENCHMARKS.md, "fifth look")."""
        now = time.monotonic()
        back = [run for slot in self.slots if len(slot.queued) > 1 and slot.stalled(now)
                for run in slot.take_back()]
        if back:
            self.requeue(back)
            self.dispatch()

    def collect(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for a child's message or a lane's answer, and
        handle the children's messages."""
        busy = {slot.conn: slot for slot in self.in_flight()}
        for conn in wait([*busy, self.lanes.wake_fd], timeout):
            if conn == self.lanes.wake_fd:
                self.lanes.drain_wakeups()
                continue
            slot = busy[conn]
            try:
                messages = slot.receive()
            except (EOFError, OSError):
                self.child_died(slot)
                continue
            for message in messages:
                self.handle_message(slot, message)
        self.dispatch()

    def handle_message(self, slot: Slot, message: tuple) -> None:
        kind, run_id = message[0], message[1]
        current = slot.current
        if current is None or current.lease.run_id != run_id:
            return
        if kind == "log":
            current.logs = (current.logs or []) + message[2]
            current.dropped = message[3]
            return
        if kind == "heartbeat":
            try:
                held = self.broker.heartbeat([current.lease])
            except TRANSIENT as exc:
                # The messages read with this one must still be handled (their outcomes
                # would be lost); heartbeat_if_due extends the lease in time anyway.
                self.note_failure("heartbeat", exc)
                return
            if held:
                current.lease = held[0]
            else:
                current.lost = True
            return
        _, _, attempt, ok, result, error, logs, began, finished = message
        if current.logs:
            logs = current.logs + logs
        self.add_outcome(Outcome(
            lease=current.lease,
            outcome=AttemptOutcome.SUCCEEDED if ok else AttemptOutcome.FAILED,
            result=result, error=error, logs=logs,
        ))
        took = finished - began
        self.avg_run_s = took if self.avg_run_s is None else 0.8 * self.avg_run_s + 0.2 * took
        slot.queued.popleft()
        # The next run in the pipe started when this one finished (same monotonic clock).
        slot.begin_head(finished)

    def streamed_logs(self, run: InFlight) -> list:
        """The log of a run that never returned: the lines its child streamed, and a
        note of those the cap dropped."""
        logs = run.logs or []
        if run.dropped:
            logs = [*logs, dropped_note(run.dropped, conf.get("MAX_LOG_LINES"))]
        return logs

    def add_outcome(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)

    def child_died(self, slot: Slot) -> None:
        # Outcomes the child sent before it died may still be in the pipe: read them
        # first, so the run it died in, not one it finished, is the one marked crashed.
        try:
            while slot.queued and slot.conn.poll():
                for message in slot.receive():
                    self.handle_message(slot, message)
        except (EOFError, OSError):
            pass
        current = slot.current
        if current is None:
            self.restart(slot)
            return
        slot.process.join(1)
        code = slot.process.exitcode
        self.add_outcome(Outcome(
            lease=current.lease, outcome=AttemptOutcome.CRASHED,
            error=f"the worker's child process died (exit code {code}) while running the run",
            logs=self.streamed_logs(current),
        ))
        self.log.warning("worker: child running run %s died (exit code %s); restarting it",
                         current.lease.run_id, code)
        self.requeue(self.restart(slot))

    def restart(self, slot: Slot) -> list[InFlight]:
        """Replace ``slot``'s child with the lanes paused (forking beside other threads
        risks a lock held in the child for ever); returns the runs it had not started."""
        with self.lanes.paused():
            return slot.restart()

    def enforce_deadlines(self) -> None:
        now = time.monotonic()
        for slot in self.in_flight():
            current = slot.current
            if not slot.process.is_alive():
                self.child_died(slot)
            elif now >= current.deadline:
                self.log.warning("worker: run %s exceeded timeout_s=%s; cutting it off",
                                 current.lease.run_id, current.timeout_s)
                self.add_outcome(Outcome(
                    lease=current.lease, outcome=AttemptOutcome.TIMED_OUT,
                    error=f"timed out after {current.timeout_s} s; the handler was cut off",
                    logs=self.streamed_logs(current),
                ))
                self.requeue(self.restart(slot))

    def flush(self, force: bool = False) -> None:
        """Hand the collected outcomes (at most ACK_BATCH_MAX) to the ack lane as one batch
        when the lane is idle, ACK_BATCH_MAX are collected, the worker is stopping or
        ``force`` (harvest_acks takes the answer; a batch the database did not take comes
        back)."""
        if not self.outcomes:
            return
        now = time.monotonic()
        if not force and now < self.ack_paused_until:
            return
        due = (force or self.stopping or not self.acking
               or len(self.outcomes) >= ACK_BATCH_MAX)
        if not due:
            return
        while self.outcomes:
            outcomes = self.outcomes[:ACK_BATCH_MAX]
            del self.outcomes[:ACK_BATCH_MAX]
            self.acking.append((self.lanes.ack.submit(self.ack_call, outcomes), outcomes))
            if not (force or self.stopping):
                break  # the rest goes with the next ack, when this one has committed

    def ack_call(self, outcomes: list[Outcome]) -> list[bool]:
        """In the ack lane: ack ``outcomes`` in one transaction; returns which applied."""
        try:
            return self.broker.complete(outcomes)
        except POISON:
            # One outcome the database refuses must not wedge the batch: ack one by one
            # and record a poison outcome as a plain failure.
            return [self.complete_alone(outcome) for outcome in outcomes]

    def harvest_acks(self) -> None:
        """Take the ack lane's answers that have come: count the runs finished, report
        refused (stale) acks; a batch that failed on a broken connection goes back to be
        acked again in a second."""
        while self.acking and self.acking[0][0].done():
            future, outcomes = self.acking.pop(0)
            try:
                accepted = future.result()
            except TRANSIENT as exc:
                self.note_failure("ack", exc)
                self.ack_paused_until = time.monotonic() + 1.0
                self.outcomes = outcomes + self.outcomes
                continue
            self.finished += len(outcomes)
            for outcome, ok in zip(outcomes, accepted, strict=True):
                if not ok:
                    self.log.warning("worker: ack of run %s attempt %s refused: lease is "
                                     "stale", outcome.lease.run_id, outcome.lease.attempt)

    def complete_alone(self, outcome: Outcome) -> bool:
        try:
            return self.broker.complete([outcome])[0]
        except POISON as exc:
            self.log.warning("worker: outcome of run %s cannot be stored (%s); recording "
                             "a failure instead", outcome.lease.run_id, exc)
            failure = Outcome(lease=outcome.lease, outcome=AttemptOutcome.FAILED,
                              error=f"the attempt's outcome could not be stored: {exc}")
            return self.broker.complete([failure])[0]

    def heartbeat_if_due(self) -> None:
        if time.monotonic() - self.last_heartbeat < self.heartbeat_s:
            return
        self.last_heartbeat = time.monotonic()
        self.register()
        live = [run for run in self.handed() if not run.lost]
        if not live and not self.ahead:
            return
        held = {(le.run_id, le.attempt): le for le in self.broker.heartbeat(
            [c.lease for c in live] + [leased.lease for leased in self.ahead])}
        kept = deque()
        for leased in self.ahead:
            key = (leased.lease.run_id, leased.lease.attempt)
            if key in held:
                leased.lease = held[key]
                kept.append(leased)
            else:
                self.log.warning("worker: lease on run %s lost before it started; dropped",
                                 leased.lease.run_id)
        self.ahead = kept
        for current in live:
            key = (current.lease.run_id, current.lease.attempt)
            if key in held:
                current.lease = held[key]
            else:
                current.lost = True
                self.log.warning("worker: lease on run %s lost; its outcome will be refused",
                                 current.lease.run_id)
