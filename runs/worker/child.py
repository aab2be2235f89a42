"""The child process that runs handlers for a worker (one run at a time per child).

The worker (parent) owns the database and broker connections of leases, heartbeats and
acks; a child executes handler code and reports back over a pipe, so the parent can cut
off a handler stuck in a busy loop by killing the child, and survive a handler that kills
its own process. The one exception: a child acks a workflow node's success itself when
its worker allows it, on a session of its own (runs/worker/handoff.py).

What crosses the pipe, and how: runs/worker/wire.py.
"""

import contextvars
import ctypes
import json
import logging
import math
import os
import signal
import threading
import time
import traceback
from datetime import UTC, datetime

from runs import tracing
from runs.clock import from_us
from runs.context import RunContext
from runs.execution.leases import EARLY_MAX_S
from runs.execution.retry import exception_names, refusal, stored
from runs.worker import handoff
from runs.worker.results import result_problem
from runs.worker.wire import message_sender, quiet_sender
from scheduler_core.exceptions import PermanentFailure, RetryAfter

log = logging.getLogger("scheduler.worker")
PR_SET_PDEATHSIG = 1
HEARTBEAT_MIN_INTERVAL_S = 1.0
# A run still going after this many seconds sends its log lines to the worker as they come
# (in a thread of the child, at most this often): a run that never returns keeps the lines
# it logged until this long before its end. Shorter runs send theirs with their outcome.
LOG_STREAM_S = 0.25


class RunCancelled(BaseException):  # noqa: N818 - named like asyncio's CancelledError
    """Raised inside a handler whose run was cancelled while it ran: its worker sent the
    child SIGUSR1 (docs/architecture.md, "Cancelling a running run"). A BaseException, as
    asyncio's CancelledError, so ``except Exception`` in handler code does not swallow it;
    ``finally`` blocks and context managers still run. A handler that goes on anyway is
    killed after CANCEL_GRACE_S."""


# The database alias of the worker this child belongs to (set in the worker before it
# forks): a handler context's ``using``, where what it reads lazily comes from.
WORKER_DATABASE = ["default"]

# Async runs (runs/worker/child_async.py): the capture of the run a record is emitted in
# (None: not an async run's), the live captures by task seq (the streamer's; changed
# under the send lock) and the event loop's thread (its records outside a run are not
# any run's).
ASYNC_CAPTURE: contextvars.ContextVar = contextvars.ContextVar("async_capture", default=None)
ASYNC_LIVE: dict = {}
LOOP_THREAD = [0]

# The seq of the task whose handler is executing (0: none). A cancel raises only while it
# is set, so it can never land in the child's own code between runs.
_executing = [0]


def on_cancel_signal(control):
    """The SIGUSR1 handler of a child: raise RunCancelled in the executing handler when
    it is the task the worker asked to stop (``control[2]``, its seq: runs/worker/wire.py).
    Takes no lock: it runs on the main thread, which may hold the control lock."""
    def handler(signum, frame):
        if _executing[0] and control[2] == _executing[0]:
            _executing[0] = 0
            raise RunCancelled("the run was cancelled while it ran")
    return handler


class CaptureHandler(logging.Handler):
    """Collects the records emitted in the child while a run executes, at most
    ``max_lines`` per attempt (then one line saying how many were dropped), so a handler
    that logs without end cannot stall its worker or fill the database. ``lock`` (an
    RLock, the child's send lock) guards the records: the log streamer takes them from
    another thread (stream_logs)."""

    routes = False  # the child's own: records of async runs go to theirs (ASYNC_CAPTURE)

    def __init__(self, max_lines: int = 1000, lock=None):
        super().__init__(logging.DEBUG)
        self.max_lines = max_lines
        self.guard = lock or threading.RLock()
        self.records: list[tuple] = []
        self.dropped = 0
        self.kept = 0  # lines of this attempt kept so far, streamed or not
        self.dropped_sent = 0  # the dropped count last streamed
        self.run_id: int | None = None  # the run executing (None between runs)
        self.began = 0.0  # its start, time.monotonic()

    def reset(self, run_id: int | None = None) -> None:
        """A run (``run_id``) starts: no lines yet."""
        with self.guard:
            self.records, self.dropped, self.kept, self.dropped_sent = [], 0, 0, 0
            self.run_id, self.began = run_id, time.monotonic()

    def lines(self) -> list[tuple]:
        """The lines not yet taken, with a note of how many the cap dropped."""
        if not self.dropped:
            return self.records
        return [*self.records, dropped_note(self.dropped, self.max_lines)]

    def finish(self) -> list[tuple]:
        """The run ended: its lines not yet streamed (lines()); nothing more streams."""
        with self.guard:
            lines = self.lines()
            self.records, self.run_id = [], None
            return lines

    def take_streamable(self) -> tuple[int, list[tuple], int] | None:
        """(run id, lines, lines dropped so far) to stream now: the lines of a run going
        for LOG_STREAM_S or more, taken, when there are new ones or more were dropped;
        else None. Call with ``guard`` held, and send before releasing it, so streamed
        lines reach the worker before the run's outcome."""
        if (self.run_id is None or time.monotonic() - self.began < LOG_STREAM_S
                or not (self.records or self.dropped != self.dropped_sent)):
            return None
        records, self.records, self.dropped_sent = self.records, [], self.dropped
        return self.run_id, records, self.dropped

    def emit(self, record: logging.LogRecord) -> None:
        if record.name == log.name:
            return  # the child's own lines (a handler's traceback) are the operators'
        if self.routes:
            run = ASYNC_CAPTURE.get()
            if run is not None:
                run.emit(record)
                return
            if record.thread == LOOP_THREAD[0]:
                return  # the event loop's own, outside any run
        if self.kept >= self.max_lines:  # past the cap: count it, format nothing
            with self.guard:
                self.dropped += 1
            return
        try:
            message = record.getMessage()
            if record.exc_info:
                message += "\n" + "".join(traceback.format_exception(*record.exc_info))
            created = datetime.fromtimestamp(record.created, tz=UTC)
        except Exception:  # noqa: BLE001 - a log line must never fail the run
            self.handleError(record)
            return
        with self.guard:
            if self.kept >= self.max_lines:
                self.dropped += 1
                return
            self.kept += 1
            self.records.append((created, record.levelno, record.name, message))


def dropped_note(dropped: int, cap: int) -> tuple:
    """The log line that ends an attempt's lines when the cap (``cap`` lines) dropped
    ``dropped`` more."""
    return (datetime.now(tz=UTC), logging.WARNING, "scheduler.worker",
            f"{dropped} more log lines dropped (the cap is {cap} per attempt)")


def stream_logs(capture: CaptureHandler, send) -> None:
    """In a daemon thread of the child: every LOG_STREAM_S, send the log lines of a run
    going for that long (``("log", run_id, lines)``). Holding the send lock from taking
    to sending keeps them ahead of the run's ``done``."""
    while True:
        time.sleep(LOG_STREAM_S)
        with send.lock:
            for each in (capture, *ASYNC_LIVE.values()):
                taken = each.take_streamable()
                if taken is not None:
                    send(("log", *taken))


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def execute(task: dict, capture: CaptureHandler, send) -> tuple:
    """Run one task's handler (``task`` as the worker sent it: see runs/worker/wire.py);
    returns the ``("done", ...)`` message."""
    from scheduler_core.registry import get_handler, is_internal

    began = time.monotonic()
    capture.reset(task["run_id"])
    last_beat = [0.0]

    def beat():
        now = time.monotonic()
        if now - last_beat[0] >= HEARTBEAT_MIN_INTERVAL_S:
            last_beat[0] = now
            send(("heartbeat", task["run_id"]))

    ctx = RunContext(
        run_id=task["run_id"], job_id=task["job_id"], attempt=task["attempt"],
        scheduled_at=from_us(task["scheduled_at"]), deadline=from_us(task["deadline"]),
        handler=task["handler"],
        logger=logging.getLogger(f"jobs.run.{task['handler']}"), _beat=beat,
        using=WORKER_DATABASE[0],
    )
    ok, result, error, retry = True, None, "", None
    try:
        _executing[0] = task["seq"]
        # Cancellable while it waits (RunCancelled from the signal), as once running.
        if wait_s := not_yet_s(task):
            time.sleep(wait_s)
            began = time.monotonic()  # the wait is not the run's time (avg_run_s)
        result = get_handler(task["handler"])(ctx, json.loads(task["payload"]))
        _executing[0] = 0
    except BaseException as exc:  # noqa: BLE001 - SystemExit from a handler is a failure too
        _executing[0] = 0
        ok, error, retry = False, error_text(exc), retry_asked(exc)
        # The run keeps the exception's type and message, which its owner reads (REST,
        # admin, alerts); the traceback, with this server's paths, is the operators'.
        # An internal handler's runs are the project's own (no client makes them), and
        # django.tasks gives their traceback back to the code that enqueued them.
        if is_internal(task["handler"]):
            error = traceback.format_exc()
        log_failure(task, exc, error, retry, cancelled=isinstance(exc, RunCancelled))
    if ok:
        problem = result_problem(result)
        if problem:
            ok, result, error = False, None, f"the handler's result {problem}"
    return ("done", task["run_id"], task["attempt"], ok, result, error, capture.finish(),
            began, time.monotonic(), retry)


def log_failure(task: dict, exc: BaseException, error: str, retry,
                cancelled: bool = False) -> None:
    """Log a handler's failure for the operators (docs/deploy.md, "Logs"): an attempt the
    retry gives up on at ERROR with its traceback, one that will be retried at WARNING on
    one line. Unknown (a task without the job's max_attempts) is logged as WARNING with
    the traceback, so a last attempt's traceback is never lost. ``cancelled``: the
    worker stopped the handler (its run was cancelled), which is no failure: INFO."""
    final = False if cancelled else gives_up(task, exc, retry)
    level = logging.INFO if cancelled else logging.ERROR if final else logging.WARNING
    what = "was cancelled; its handler stopped" if cancelled else \
        "failed for good" if final else "failed; it will be retried"
    log.log(level, "run %s (handler %s, attempt %s) %s: %s", task["run_id"], task["handler"],
            task["attempt"], what, error, exc_info=final is not False,
            extra={"run_id": task["run_id"], "attempt": task["attempt"]})


def gives_up(task: dict, exc: BaseException, retry) -> bool | None:
    """Whether the retry gives up on this failed attempt (runs/execution/retry.py; completion's
    fail_runs decides for real): the last of max_attempts, a PermanentFailure, or an
    exception the job's retry_on / never_retry_on refuses. None when the task does not
    carry the job's max_attempts (a run a workflow's ack continued)."""
    max_attempts = task.get("max_attempts")
    if max_attempts is None:
        return None
    if retry is False or task["attempt"] >= max_attempts:
        return True
    policy = task.get("retry")
    if isinstance(policy, str):
        policy = json.loads(policy)
    return bool(isinstance(retry, tuple) and refusal(stored(policy, task["job_id"]),
                                                     exception_names(exc)))


def error_text(exc: BaseException) -> str:
    """What a run's owner is told of ``exc``: its type and message, as a traceback's last
    line gives them (``ValueError: boom``; ``billing.errors.Declined: ...`` for a class
    outside the builtins), never the frames, which name this server's files
    (docs/security.md, "What a tenant sees of an error")."""
    kind = type(exc)
    name = kind.__qualname__ if kind.__module__ == "builtins" else \
        f"{kind.__module__}.{kind.__qualname__}"
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - as traceback does for a __str__ that raises
        message = "<exception str() failed>"
    return f"{name}: {message}" if message else name


def retry_asked(exc: BaseException) -> float | bool | tuple[str, ...] | None:
    """What a handler's exception asks of the retry (runs/types.py, Outcome.retry): the
    delay of a RetryAfter (seconds), False for a PermanentFailure, else the dotted names
    of its classes, for the job's retry_on / never_retry_on (runs/execution/retry.py)."""
    if isinstance(exc, RetryAfter):
        return exc.delay_s if math.isfinite(exc.delay_s) else None
    if isinstance(exc, PermanentFailure):
        return False
    return exception_names(exc)


def not_yet_s(task: dict) -> float:
    """Seconds until ``task``'s ``not_before`` (time.time(); set for a run leased just
    before its run_at: runs/execution/leases.py, runs/worker/lease_ahead.py lease_at), at
    most EARLY_MAX_S; 0 when it has passed or is not set."""
    not_before = task.get("not_before")
    if not not_before:
        return 0.0
    return min(max(not_before - time.time(), 0.0), EARLY_MAX_S)


def take_task(task: dict, control, lock) -> bool:
    """Whether to start ``task`` (not taken back by the parent); records it as started.
    ``control`` and ``lock``: see runs/worker/wire.py."""
    with lock:
        if task["seq"] <= control[1]:
            return False
        control[0] = task["seq"]
        return True


def child_main(conn, control, lock, handoff_config=None, quiet_fd=None,
               on_start=None) -> None:
    """Entry point of a worker's child process: serve tasks until the pipe closes.
    ``control`` (a shared array of int64) and ``lock``: see runs/worker/wire.py;
    ``handoff_config`` (a handoff.Handoff, or None): what this child needs to ack
    workflow nodes itself (runs/worker/handoff.py), ``quiet_fd`` the write end of its
    quiet pipe for the messages about those acks (wire.quiet_sender); ``on_start(send,
    capture)``, if given, is called once set up (the async runs' loop:
    runs/worker/child_async.py)."""
    _die_with_parent()
    handoff.HANDOFF[0] = handoff_config
    # A process-group SIGTERM (honcho, Ctrl-C in a terminal) is meant for the worker; it
    # decides whether the run finishes or is released, and kills children itself.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, on_cancel_signal(control))
    from scheduler_core import conf

    send = message_sender(conn)
    quiet = quiet_sender(quiet_fd, send)
    capture = CaptureHandler(conf.get("MAX_LOG_LINES"), lock=send.lock)
    capture.routes = True
    # A process whose main thread awaited an async run through asgiref (which copies a
    # run's context variables back to its caller) would fork children routing every sync
    # run's lines to that old run: this thread's lines are the sync runs'.
    ASYNC_CAPTURE.set(None)
    root = logging.getLogger()
    root.addHandler(capture)
    root.setLevel(logging.INFO)
    # Handler logging must land on the attempt, not only on the worker's console.
    logging.getLogger("jobs").propagate = True
    threading.Thread(target=stream_logs, args=(capture, send), daemon=True).start()
    forget_inherited_connections()
    if on_start is not None:
        on_start(send, capture)
    while True:
        try:
            tasks = conn.recv()
        except (EOFError, OSError):
            tasks = None
        if tasks is None:
            tracing.flush()  # os._exit skips the SDK's flush at exit
            os._exit(0)
        for task in tasks:
            if take_task(task, control, lock):
                run_task(task, capture, send, control, lock, quiet)


def run_task(task: dict, capture: CaptureHandler, send, control, lock, quiet) -> None:
    """Execute ``task`` and report it; a workflow node's success this child may ack
    itself is acked here, and the run that ack continued executes next, and so on
    (runs/worker/handoff.py; ``quiet``: the quiet pipe's sender, wire.quiet_sender)."""
    while task is not None:
        done = tracing.attempt(task, lambda t=task: execute(t, capture, send)) \
            if tracing.on() else execute(task, capture, send)
        # Lines the run logged, streamed already or not, go with the worker's ack.
        silent = done[3] and capture.kept == 0 and not capture.dropped
        seq = handoff.claim(task, control, lock) if silent else 0
        if not seq:
            send(done)
            return
        task = handoff.ack_here(task, done, seq, control, lock, send, quiet)


# Database connections a replacement child inherited open from its worker, kept
# referenced (never closed nor collected here): their sockets are the worker's sessions.
_INHERITED: list = []


def forget_inherited_connections() -> None:
    """Drop, without closing, the database connections this child inherited at fork (a
    replacement child is forked while the worker's main thread holds its own): a
    handler's query, or an ack in the child, then opens a session of its own instead of
    writing into the worker's."""
    from django.db import connections

    for connection in connections.all(initialized_only=True):
        if connection.connection is not None:
            _INHERITED.append(connection.connection)
            connection.connection = None

