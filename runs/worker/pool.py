"""The worker's pool of child processes: one ``Slot`` per child, holding the runs handed
to it in order (runs/worker/child.py runs them; runs/worker/wire.py is what crosses the
pipe). Replacing a child, killing it and taking back the runs it has not started are
here; when to do so is the worker's (runs/worker/supervise.py, runs/worker/lease_ahead.py).
"""

import fcntl
import functools
import multiprocessing
import os
import signal
from collections import deque
from dataclasses import dataclass

from runs.types import Lease, Outcome
from runs.worker import child_async, handoff, wire
from runs.worker.child import child_main, dropped_note
from scheduler_core import conf

FORK = multiprocessing.get_context("fork")

# A run that has been executing this long has gone long (runs are handed several at once
# only while they average under PREFETCH_MAX_RUN_S, lease_ahead.py): the runs waiting
# behind it in its child are taken back for the other children, and its child gets no
# more until it ends. So a short run waits at most about this long behind a long one
# (docs/architecture.md).
STALL_S = 0.1
# Longest wait for a child's control lock (held for a few instructions at a time): past
# it, the child died holding it (Slot.lock_or_kill).
LOCK_WAIT_S = 0.1
# Longest wait for a retired child to exit once asked (it is idle, between runs): past it,
# it is killed (Slot.let_exit).
EXIT_WAIT_S = 2.0
# Capacity asked for a child's async pipe (Linux's default cap for a pipe; 64 KiB where
# it cannot be had): runs/worker/async_hand.py keeps what waits in it under half.
ASYNC_PIPE_BYTES = 1 << 20


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
    logs: list | None = None  # lines the child streamed while it ran (runs/worker/child.py)
    dropped: int = 0  # lines the cap dropped, as last streamed
    # time.monotonic() by which a cancelled run's handler must have stopped (inf: the run
    # is not being cancelled): its child is killed then (runs/worker/cancels.py).
    cancel_deadline: float = float("inf")
    watched: bool = False  # known to be a workflow node's run (runs/execution/continuation.py)
    # Its success, which the child is acking itself (runs/worker/handoff.py): what the
    # worker acks if that ack does not come back.
    pending: Outcome | None = None
    # A run of an async handler, on its child's event loop (Slot.running), started when
    # handed; its deadline is past its timeout_s by the kill grace (async_hand.py).
    is_async: bool = False


class Slot:
    """One child process and the runs handed to it, in order: the first is executing,
    the rest wait in the pipe. Handing a child several short runs at once keeps it busy
    while the worker is in a lease or ack transaction (BENCHMARKS.md, "W2 against the ceiling");
    long runs go one at a time, so a child never sits on runs another worker could start.
    """

    def __init__(self, handoff_config: handoff.Handoff | None = None, max_runs: int = 0):
        self.handoff = handoff_config  # what the child needs to ack itself (None: it does not)
        # Runs a child executes before it is replaced (0: never; runs/worker/recycle.py).
        self.max_runs = max_runs
        self.queued: deque[InFlight] = deque()
        self.waiting = 0  # bytes of the runs queued behind the head (estimated)
        self.start()

    @property
    def current(self) -> InFlight | None:
        """The run the child is executing, if any."""
        return self.queued[0] if self.queued else None

    @property
    def full(self) -> bool:
        """Whether the child is to be handed no more runs: it is retiring, or it has been
        given (handed, or continued itself) ``max_runs`` runs (runs/worker/recycle.py).
        Read without the lock: only the worker ever raises the budget (take_back)."""
        return self.retiring is not None or self.control[handoff.BUDGET] == 0

    def executing(self) -> list[InFlight]:
        """The runs the child is executing: the head of its queue and its async runs."""
        return [*([self.queued[0]] if self.queued else ()), *self.running.values()]

    def finish_async(self, run_id: int) -> InFlight:
        """Drop async run ``run_id``, which has ended, and count it as one the child ran."""
        run = self.running.pop(run_id)
        self.async_bytes -= run.size
        self.ran += 1
        return run

    def pop_finished(self) -> InFlight:
        """Drop the run executing, which has ended, and count it as one the child ran."""
        self.ran += 1
        return self.queued.popleft()

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
        # skip tasks], read and written under the lock (runs/worker/child.py, take_task);
        # and the task whose handler is to stop (signal_cancel), read without it.
        # Then whether the child may ack workflow nodes itself, the last task number
        # given out, by the worker or the child, and the runs it may still start
        # (runs/worker/handoff.py, BUDGET).
        self.lock = FORK.Lock()
        self.control = FORK.RawArray("q", handoff.CONTROL_SIZE)
        self.control[handoff.BUDGET] = self.max_runs if self.max_runs > 0 else -1
        self.seq = 0  # number of the last task handed to the child (its counter is new)
        self.allowed = False  # what control[handoff.ALLOWED] says
        self.lock_lost = False  # lock_or_kill could not have the lock: replace the child
        self.ran = 0  # runs the child finished (pop_finished)
        # Why the child is being replaced once its last run ends ("runs", "memory"), or
        # None; its resident set (KiB) when read past the cap, and the ``ran`` when it
        # was last read (runs/worker/recycle.py).
        self.retiring: str | None = None
        self.rss_kib = 0
        self.rss_read_at = 0
        # The quiet pipe: the child's messages about its own acks, read by the worker
        # before the main pipe but never waited on (wire.quiet_sender).
        self.quiet_fd, quiet_w = os.pipe()
        os.set_blocking(self.quiet_fd, False)
        # The async pipe: runs of async handlers and their cancels, read by the child's
        # event loop (runs/worker/child_async.py); ``running`` holds those runs by run id,
        # ``async_bytes`` their tasks' size.
        async_r, self.async_fd = os.pipe()
        self.async_capacity = grow_pipe(self.async_fd)
        self.running: dict[int, InFlight] = {}
        self.async_bytes = 0
        self.process = FORK.Process(target=child_main,
                                    args=(child, self.control, self.lock, self.handoff,
                                          quiet_w, functools.partial(child_async.start,
                                                                     async_r)),
                                    daemon=True)
        self.process.start()
        child.close()
        os.close(quiet_w)
        os.close(async_r)
        self.conn = parent
        self.received = bytearray()
        self.quiet_received = bytearray()
        # Quiet messages held for main-pipe ones written before them, and the main
        # pipe's messages read so far (wire.in_order).
        self.quiet_held: list[tuple[int, tuple]] = []
        self.main_read = 0

    def next_seq(self) -> int | None:
        """Number the next task handed to the child (under the lock: the child numbers
        the runs it continues from the same counter, runs/worker/handoff.py) and take it
        from the child's budget; None when the lock cannot be had (lock_lost) or the
        budget is spent (it started its last run meanwhile)."""
        if not self.lock_or_kill():
            return None
        try:
            budget = self.control[handoff.BUDGET]
            if budget == 0:
                return None
            if budget > 0:
                self.control[handoff.BUDGET] = budget - 1
            self.control[handoff.LAST_SEQ] += 1
            self.seq = self.control[handoff.LAST_SEQ]
        finally:
            self.lock.release()
        return self.seq

    def allow(self, allowed: bool) -> None:
        """Let the child ack workflow nodes itself, or stop it (runs/worker/handoff.py)."""
        if not self.lock_or_kill():
            return
        try:
            self.control[handoff.ALLOWED] = int(allowed)
        finally:
            self.lock.release()
        self.allowed = allowed

    def lock_or_kill(self) -> bool:
        """Take the control lock within LOCK_WAIT_S. A child killed while holding it
        (the OOM killer, say) holds it for ever: then the child is killed, if it still
        lives, and ``lock_lost`` set, for the worker to replace it (its new child comes
        with a new lock). Returns whether the lock is held."""
        if self.lock.acquire(timeout=LOCK_WAIT_S):
            return True
        self.lock_lost = True
        if self.process.is_alive():
            os.kill(self.process.pid, signal.SIGKILL)
        return False

    def send(self, tasks: list[dict]) -> None:
        """Send ``tasks`` (runs in order) to the child as one message (wire.send_tasks)."""
        wire.send_tasks(self.conn, tasks)

    def receive(self) -> list[tuple]:
        """The messages the child has sent so far, from both pipes, in the order it wrote
        them (wire.in_order; the quiet pipe is read first, so a quiet message written
        after a main one read now is among them). Raises EOFError once the child is
        gone."""
        self.quiet_held += wire.receive_quiet(self.quiet_fd, self.quiet_received)
        try:
            main = wire.receive_messages(self.conn, self.received)
        except (EOFError, OSError):
            quiet = self.ordered([])
            if quiet:
                return quiet  # the end of the pipe is seen at the next call
            raise
        return self.ordered(main)

    def receive_quiet(self) -> list[tuple]:
        """The quiet pipe's messages, read without waiting, due before every main-pipe
        message not yet read (the others wait in ``quiet_held``)."""
        self.quiet_held += wire.receive_quiet(self.quiet_fd, self.quiet_received)
        return self.ordered([]) if self.quiet_held else []

    def ordered(self, main: list[tuple]) -> list[tuple]:
        messages, self.main_read = wire.in_order(self.quiet_held, main, self.main_read)
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
        if not self.lock.acquire(timeout=LOCK_WAIT_S):
            return []
        try:
            started = self.control[0]
            self.control[1] = self.seq
            back = [run for run in self.queued if run.seq > started]
            if self.control[handoff.BUDGET] >= 0:
                self.control[handoff.BUDGET] += len(back)  # they will not run here
        finally:
            self.lock.release()
        head = self.queued[0] if self.queued else None
        for run in back:
            self.queued.remove(run)
            if run is not head:  # begin_head took the head's size off already
                self.waiting -= run.size
        return back

    def send_async(self, items: list[dict]) -> None:
        """Send async tasks or cancels to the child's event loop (wire.write_frame)."""
        wire.write_frame(self.async_fd, items)

    def signal_cancel(self, run: InFlight) -> None:
        """Ask the child to stop ``run``'s handler (RunCancelled raised in it, if it is
        still the one executing): its seq in ``control``, then SIGUSR1; an async run's
        asyncio task is cancelled instead, asked over the async pipe."""
        if run.is_async:
            try:
                self.send_async([{"cancel": run.seq}])
            except OSError:
                pass  # the child is gone: collect sees it
            return
        self.control[2] = run.seq
        if self.process.is_alive():
            os.kill(self.process.pid, signal.SIGUSR1)

    def let_exit(self) -> int | None:
        """Ask the child, which has no run left, to exit (it skips the runs taken back
        from its pipe first), and wait up to EXIT_WAIT_S; returns its exit code (0: it
        exited; None: still alive, it is killed by kill or restart)."""
        try:
            wire.send_stop(self.conn)
        except OSError:
            pass  # gone already
        self.process.join(EXIT_WAIT_S)
        return self.process.exitcode

    def kill(self) -> None:
        if self.process.is_alive():
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.join(5)
        self.conn.close()
        if self.quiet_fd >= 0:  # kill may come twice (shutdown, then serve's end)
            os.close(self.quiet_fd)
            os.close(self.async_fd)
            self.quiet_fd = self.async_fd = -1

    def restart(self, head: bool = True) -> tuple[list[InFlight], list[InFlight]]:
        """Replace the child; returns the runs handed to it that it had not started, and
        those it had whose outcome was never read (a lost message), read from ``control``
        once it is dead: an attempt runs at most once on its lease. The first queued run
        is the caller's to end, unless ``head`` is False (the caller dropped it)."""
        self.kill()
        started = self.control[0]
        waiting = list(self.queued)[1 if head else 0:]
        self.queued.clear()
        self.waiting = 0
        self.start()
        return ([run for run in waiting if run.seq > started],
                [run for run in waiting if run.seq <= started])


def grow_pipe(fd: int) -> int:
    """Ask for ASYNC_PIPE_BYTES of capacity for pipe ``fd``; returns what it has."""
    try:
        return fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, ASYNC_PIPE_BYTES)
    except (OSError, AttributeError):
        return 65_536


def streamed_logs(run: InFlight) -> list:
    """The log of a run that never returned: the lines its child streamed, and a note of
    those the cap dropped."""
    logs = run.logs or []
    if run.dropped:
        logs = [*logs, dropped_note(run.dropped, conf.get("MAX_LOG_LINES"))]
    return logs


class Children:
    """The worker's child processes, one Slot each (``slots``), and the moving average of
    their handlers' wall time (``avg_run_s``, None until a run ended), which the
    lease-ahead reads. The Worker starts and kills them; the supervisor, the cancels and
    the recycling replace one (restart) with the worker's ``lanes`` paused."""

    def __init__(self, lanes):
        self.lanes = lanes
        self.slots: list[Slot] = []
        self.avg_run_s: float | None = None
        # Async runs whose child was killed or replaced under them, for the supervisor to
        # record (Supervisor.record_orphans).
        self.orphans: list[InFlight] = []

    def start(self, count: int, handoff_config: handoff.Handoff | None, max_runs: int) -> None:
        """Start ``count`` children (Slot's arguments)."""
        for _ in range(count):
            self.slots.append(Slot(handoff_config, max_runs))

    def in_flight(self) -> list[Slot]:
        """Slots whose child has runs."""
        return [slot for slot in self.slots if slot.queued or slot.running]

    def handed(self) -> list[InFlight]:
        """Every run handed to a child and not finished."""
        return [run for slot in self.slots for run in (*slot.queued, *slot.running.values())]

    def empty(self) -> int:
        """Children with no run, sync or async."""
        return sum(1 for slot in self.slots if not slot.queued and not slot.running)

    def note_run_time(self, took: float) -> None:
        """A handler ran ``took`` seconds: the moving average the prefetch reads."""
        self.avg_run_s = took if self.avg_run_s is None else 0.8 * self.avg_run_s + 0.2 * took

    def restart(self, slot: Slot, head: bool = True) -> list[InFlight]:
        """Replace ``slot``'s child with the lanes paused (forking beside other threads
        risks a lock held in the child for ever); returns the runs it had not started
        (Slot.restart; ``head`` as there). Its async runs, cut off, and the runs it
        started whose outcome was never read go to ``orphans``."""
        self.orphans.extend(slot.running.values())
        with self.lanes.paused():
            waiting, unheard = slot.restart(head)
        self.orphans.extend(unheard)
        return waiting

    def kill(self) -> None:
        """Kill every child (at the stop; twice is harmless)."""
        for slot in self.slots:
            slot.kill()
