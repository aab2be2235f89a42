"""Runs of ``async def`` handlers in a worker's child (docs/async-handlers.md): one asyncio
event loop, in a thread of the child, runs as many at once as the worker hands it (at
most ASYNC_CONCURRENCY_PER_CHILD: runs/worker/async_hand.py).

The worker hands them, and asks for their cancel, over the child's async pipe, which the
loop reads itself: an async run starts at once, whatever the child's main thread (its
sync runs, runs/worker/child.py) is doing. Each run reports over the child's main pipe as
a sync run does (heartbeats, streamed log lines, ``done``), or, cut off by its timeout
(asyncio.timeout, to its task's deadline), ``("timed_out", run_id, attempt, error, logs,
began, finished)`` (runs/worker/wire.py). A handler that blocks the loop past its timeout
is the worker's to stop: it kills the child (runs/worker/supervise.py).

Log records go to the run they were emitted in by a context variable
(child.ASYNC_CAPTURE), which asyncio copies into the tasks and threads
(asyncio.to_thread, asgiref's sync_to_async) a handler starts.
"""

import asyncio
import json
import logging
import os
import threading
import time
import traceback

from runs import tracing
from runs.clock import from_us
from runs.context import RunContext
from runs.worker import child, wire
from runs.worker.results import result_problem


class AsyncRunner:
    """The event loop of one child and the runs on it: reads the async pipe ``fd``
    (lists of tasks, and ``{"cancel": seq}``), runs each task as an asyncio task and
    reports with ``send`` (wire.message_sender), keeping at most ``max_lines`` log lines
    per run."""

    def __init__(self, fd: int, send, max_lines: int):
        self.fd = fd
        self.send = send
        self.max_lines = max_lines
        self.received = bytearray()
        self.tasks: dict[int, asyncio.Task] = {}  # by the task's seq
        self.loop: asyncio.AbstractEventLoop | None = None

    def serve(self) -> None:
        """The loop thread's body: read the pipe and run the tasks, for ever (the child
        exits from its main thread)."""
        child.LOOP_THREAD[0] = threading.get_ident()
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        os.set_blocking(self.fd, False)
        self.loop.add_reader(self.fd, self.readable)
        self.loop.run_forever()

    def readable(self) -> None:
        try:
            chunk = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:  # the worker closed it: the main pipe's end stops the child
            self.loop.remove_reader(self.fd)
            return
        self.received += chunk
        for message in wire.decode(self.received):
            for item in message:
                if "cancel" in item:
                    task = self.tasks.get(item["cancel"])
                    if task is not None:
                        task.cancel("the run was cancelled while it ran")
                else:
                    self.tasks[item["seq"]] = self.loop.create_task(self.run(item))

    async def run(self, task: dict) -> None:
        """Run ``task``'s handler within its deadline and report its outcome."""
        from scheduler_core.registry import get_handler, is_internal

        began = time.monotonic()
        capture = RunLog(task, self.max_lines, self.send.lock, began)
        child.ASYNC_CAPTURE.set(capture)  # this asyncio task's own context
        ctx = RunContext(
            run_id=task["run_id"], job_id=task["job_id"], attempt=task["attempt"],
            scheduled_at=from_us(task["scheduled_at"]), deadline=from_us(task["deadline"]),
            handler=task["handler"],
            logger=logging.getLogger(f"jobs.run.{task['handler']}"),
            _beat=beater(task["run_id"], self.send), using=child.WORKER_DATABASE[0])
        ok, result, error, retry, late = True, None, "", None, False
        # The attempt span, current in this asyncio task only (runs/tracing.py).
        span = tracing.begin_attempt(task) if tracing.on() else None
        limit = asyncio.timeout(max(0.0, task["deadline"] / 1e6 - time.time()))
        try:
            async with limit:
                if wait_s := child.not_yet_s(task):  # leased before its run_at
                    await asyncio.sleep(wait_s)
                    began = capture.began = time.monotonic()  # the run's time is its own
                result = await get_handler(task["handler"])(ctx, json.loads(task["payload"]))
        except BaseException as exc:  # noqa: BLE001 - as child.execute; CancelledError too
            ok = False
            if isinstance(exc, TimeoutError) and limit.expired():
                late = True
                error = f"timed out after {task['timeout_s']} s; the handler was cancelled"
            else:
                error, retry = child.error_text(exc), child.retry_asked(exc)
                if is_internal(task["handler"]):
                    error = traceback.format_exc()
                # Cancelling: the worker asked (readable); a timeout's is told above.
                child.log_failure(task, exc, error, retry, cancelled=isinstance(
                    exc, asyncio.CancelledError) and asyncio.current_task().cancelling() > 0)
        if ok and (problem := result_problem(result)):
            ok, result, error = False, None, f"the handler's result {problem}"
        finished = time.monotonic()
        if span is not None:
            tracing.end_attempt(span, ok, error)
        with self.send.lock:
            logs = capture.finish()
            if late:
                self.send(("timed_out", task["run_id"], task["attempt"], error, logs, began,
                           finished))
            else:
                self.send(("done", task["run_id"], task["attempt"], ok, result, error, logs,
                           began, finished, retry))
        self.tasks.pop(task["seq"], None)


class RunLog:
    """The log capture of one async run (``task``), made at its first record: most runs
    log nothing, and a logging.Handler costs about 9 µs to make. Once made it is in
    child.ASYNC_LIVE, where the streamer finds it; ``lock`` is the send lock, ``began``
    the run's start (time.monotonic())."""

    __slots__ = ("task", "max_lines", "lock", "began", "capture")

    def __init__(self, task: dict, max_lines: int, lock, began: float):
        self.task, self.max_lines, self.lock, self.began = task, max_lines, lock, began
        self.capture: child.CaptureHandler | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.capture is None:
            capture = child.CaptureHandler(self.max_lines, lock=self.lock)
            capture.reset(self.task["run_id"])
            capture.began = self.began
            with self.lock:
                child.ASYNC_LIVE[self.task["seq"]] = capture
            self.capture = capture
        self.capture.emit(record)

    def finish(self) -> list:
        """The run ended: its lines not yet streamed. Call with the send lock held."""
        if self.capture is None:
            return []
        child.ASYNC_LIVE.pop(self.task["seq"], None)
        return self.capture.finish()


def beater(run_id: int, send):
    """``ctx.heartbeat`` of one async run: a ``("heartbeat", run_id)`` at most every
    child.HEARTBEAT_MIN_INTERVAL_S."""
    last = [0.0]

    def beat() -> None:
        now = time.monotonic()
        if now - last[0] >= child.HEARTBEAT_MIN_INTERVAL_S:
            last[0] = now
            send(("heartbeat", run_id))

    return beat


def start(fd: int, send, capture: child.CaptureHandler) -> AsyncRunner:
    """In a new child (child.child_main's ``on_start``): start the event loop's thread on
    the async pipe ``fd``, reporting with ``send``; ``capture`` is the child's (its cap on
    log lines is each async run's)."""
    runner = AsyncRunner(fd, send, capture.max_lines)
    threading.Thread(target=runner.serve, name="async-runs", daemon=True).start()
    return runner
