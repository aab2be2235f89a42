"""Background lanes for the worker's database and broker calls (BENCHMARKS.md, "W2").

A worker's parent process waits on three things: its leases, its acks and its children.
Done in turn, a lease transaction (10 ms for 50 runs on a loaded 2-core machine) leaves
both children idle once their pipes run dry, and an ack holds up the next lease. A
``Lane`` runs the calls submitted to it in its own threads, each on its own database
connection (Django keeps one per thread), so leases, acks and the children's work
overlap: the ack lane has one thread (acks commit in order), the lease lane two (a lease
waits on Redis, then on PostgreSQL; two in flight keep the children fed while one waits).
PostgreSQL stays the judge of every change: a lane only moves the waiting.

Forking a process that has other threads risks a child inheriting a lock one of them held
(and Python warns about it), so the worker pauses its lanes, joining their threads, around
the rare fork of a replacement child (``Lanes.paused``).
"""

import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

from django.db import DatabaseError, InterfaceError, close_old_connections, connections

HOUSEKEEP_INTERVAL_S = 1.0


class Lane:
    """``threads`` threads (default one) running submitted calls, each thread on its own
    database connections; with one thread, calls run in the order submitted.

    Each call's outcome (value or exception) is on the Future ``submit`` returns; when a
    call ends, a byte is written to ``wake_fd`` so a process sleeping in select() on the
    other end of that pipe wakes up at once (Lanes.wake_fd).
    """

    def __init__(self, name: str, wake_fd: int, threads: int = 1):
        self.name = name
        self.wake_fd = wake_fd
        self.threads = threads
        self.executor: ThreadPoolExecutor | None = None
        self.local = threading.local()  # per thread: when its connections were housekept
        # Held while a call is queued by ``later`` and while stop() begins: nothing is
        # queued behind the closing calls.
        self.guard = threading.Lock()
        self.stopping = False

    def submit(self, fn, *args, wake: bool = True) -> Future:
        """Run ``fn(*args)``: after the calls submitted before it with one thread, beside
        them with more; ``wake``: wake the worker when it ends (False for a call whose
        answer nobody waits for)."""
        if self.executor is None:
            self.executor = ThreadPoolExecutor(self.threads, thread_name_prefix=self.name)
        future = self.executor.submit(self._call, fn, args)
        if wake:
            future.add_done_callback(self._wake)
        return future

    def later(self, fn) -> None:
        """From one of this lane's calls: run ``fn()`` after the calls submitted so far
        (with one thread: before any submitted later). While the lane stops, at once,
        in the caller: a call queued behind the closing calls would open a connection
        again."""
        with self.guard:
            if not self.stopping and self.executor is not None:
                self.submit(fn)
                return
        fn()

    def _call(self, fn, args):
        # Django's per-request care of connections (CONN_MAX_AGE, health checks) runs in
        # the thread that owns them; a connection that failed is closed so the next call
        # reconnects (Daemon.serve does both for the main thread).
        now = time.monotonic()
        if now - getattr(self.local, "housekept_at", float("-inf")) >= HOUSEKEEP_INTERVAL_S:
            self.local.housekept_at = now
            close_old_connections()
        try:
            return fn(*args)
        except (DatabaseError, InterfaceError):
            for connection in connections.all(initialized_only=True):
                connection.close_if_unusable_or_obsolete()
            raise

    def _wake(self, future: Future) -> None:
        try:
            os.write(self.wake_fd, b".")
        except BlockingIOError:
            pass  # the pipe is full of wake-ups already

    def stop(self) -> None:
        """Finish the calls submitted, close this lane's connections, join its threads."""
        if self.executor is None:
            return
        with self.guard:
            self.stopping = True
        # Django's connections belong to the thread that opened them: one closing call
        # per thread, each held at a barrier until all have theirs (the pool starts any
        # thread it had not started yet, and no thread takes two).
        # No timeout: a thread still in a slow call takes its closing call when it ends
        # (shutdown waits for that call anyway); a timeout would let another thread take
        # two closing calls and leave the slow thread's connection open.
        barrier = threading.Barrier(self.threads)
        for _ in range(self.threads):
            self.executor.submit(self._close, barrier)
        self.executor.shutdown(wait=True)
        self.executor = None
        self.stopping = False

    @staticmethod
    def _close(barrier: threading.Barrier) -> None:
        connections.close_all()
        barrier.wait()


def os_threads() -> int:
    """Threads of this process as the kernel counts them (Linux; 1 elsewhere)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 1


class Lanes:
    """The worker's lanes: ``lease`` and ``ack``, and the pipe they wake it through."""

    def __init__(self, lease_threads: int = 1):
        self.wake_fd, self._wake_w = os.pipe()
        os.set_blocking(self.wake_fd, False)
        os.set_blocking(self._wake_w, False)
        self.lease = Lane("lease", self._wake_w, lease_threads)
        self.ack = Lane("ack", self._wake_w)
        self.closed = False

    def wake(self) -> None:
        """Wake the worker's loop from its select() at once (a stop was asked: from a
        signal handler too, whose interrupted select() would otherwise resume its wait)."""
        if self.closed:  # the loop has ended; the descriptor's number may be reused
            return
        try:
            os.write(self._wake_w, b".")
        except OSError:
            pass  # full of wake-ups already, or closed meanwhile

    def drain_wakeups(self) -> None:
        """Empty the wake-up pipe (after select() reported it readable)."""
        try:
            while os.read(self.wake_fd, 4096):
                pass
        except BlockingIOError:
            pass

    def stop(self) -> None:
        """Stop both lanes (their submitted calls finish first)."""
        self.lease.stop()
        self.ack.stop()

    @contextmanager
    def paused(self):
        """No lane thread exists inside this block (to fork safely); the lanes start again
        on their next call."""
        self.stop()
        # A joined thread may still be ending in the kernel, and fork() counts those.
        deadline = time.monotonic() + 0.2
        while os_threads() > 1 and time.monotonic() < deadline:
            time.sleep(0.001)
        yield

    def close(self) -> None:
        """Stop the lanes and close the wake-up pipe."""
        self.stop()
        self.closed = True
        os.close(self.wake_fd)
        os.close(self._wake_w)
