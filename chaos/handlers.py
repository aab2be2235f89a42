"""The handlers of the fault-injection app, registered only where it is installed (the
test and chaos settings, scheduler_project/settings_chaos.py), never in a production
deployment: ``busy_loop`` and ``suicide`` exist to occupy or kill a worker's child,
``stubborn`` to ignore a cancel, ``chaos.pid`` and ``chaos.hog`` to say which child ran a
run and to leak memory in it, ``chaos.fail`` to send a run to the dead letter.

``chaos.work`` is the handler the fault-injection load runs (docs/reliability.md,
"Execution log").

``chaos.work`` appends one line when it starts and one when it ends to the execution log
named by the environment variable ``CHAOS_EXEC_LOG``, so the harness can count how often a
run's handler really finished, independently of what the database says. It opens no
database connection: it runs in a worker's child process, which must not share the
worker's sockets.
"""

import os
import signal
import time

from jobs.registry import handler
from scheduler_core.exceptions import PermanentFailure

EXEC_LOG_ENV = "CHAOS_EXEC_LOG"


def log_line(kind: str, run_id: int, attempt: int) -> None:
    """Append ``"<kind> <run_id> <attempt> <pid> <monotonic> <wall>\\n"`` to the execution
    log (no-op when CHAOS_EXEC_LOG is unset). ``monotonic`` and ``wall`` are seconds from
    ``time.monotonic()`` and ``time.time()``: the harness compares them to detect a skewed
    local clock. One short ``write`` on an O_APPEND descriptor, so lines from concurrent
    processes never interleave."""
    path = os.environ.get(EXEC_LOG_ENV)
    if not path:
        return
    line = f"{kind} {run_id} {attempt} {os.getpid()} {time.monotonic():.6f} {time.time():.6f}\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@handler("chaos.work")
def work(ctx, payload):
    """Log "start", sleep ``payload["seconds"]`` (float, default 0) heartbeating each
    0.5 s, log "end"; returns ``{"slept_s": seconds}``, or with ``payload["items"]`` (int)
    the list 0 .. items - 1 (what a mapped workflow node runs over)."""
    seconds = float(payload.get("seconds", 0))
    log_line("start", ctx.run_id, ctx.attempt)
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, 0.5))
        ctx.heartbeat()
    log_line("end", ctx.run_id, ctx.attempt)
    if "items" in payload:
        return list(range(int(payload["items"])))
    return {"slept_s": seconds}


@handler("busy_loop")
def busy_loop(ctx, payload):
    """Spin the CPU without ever returning (tests the timeout of a stuck handler)."""
    while True:
        pass


@handler("suicide")
def suicide(ctx, payload):
    """Kill the process running it (tests a poison run)."""
    os.kill(os.getpid(), signal.SIGKILL)


@handler("chaos.pid")
def pid(ctx, payload):
    """Return ``{"pid": <the child process's pid>}``: which child ran the run (tests of
    child recycling, runs/worker/recycle.py)."""
    return {"pid": os.getpid()}


# What chaos.hog keeps: it grows for the life of its process, as a leak would.
_hoard: list[bytes] = []


@handler("chaos.hog")
def hog(ctx, payload):
    """Keep ``payload["mb"]`` (int, default 50) more MiB in this process for good, written
    so the pages are resident (a leak, for the memory cap of child recycling); returns
    ``{"pid": ..., "held_mb": <MiB kept so far>}``."""
    mb = int(payload.get("mb", 50))
    _hoard.append(b"\x01" * (mb << 20))
    return {"pid": os.getpid(), "held_mb": sum(len(b) for b in _hoard) >> 20}


@handler("stubborn")
def stubborn(ctx, payload):
    """Sleep ``payload["seconds"]`` (float, default 8), logging and ignoring every cancel
    (RunCancelled): its worker must kill it after CANCEL_GRACE_S."""
    deadline = time.monotonic() + float(payload.get("seconds", 8))
    while (left := deadline - time.monotonic()) > 0:
        try:
            time.sleep(min(left, 0.5))
        except BaseException:  # noqa: BLE001 - what a badly written handler does
            ctx.logger.info("ignoring the cancel")
    ctx.logger.info("slept to the end")


@handler("chaos.fail")
def fail(ctx, payload):
    """Sleep ``payload["seconds"]`` (float, default 0) heartbeating, then fail for good
    (PermanentFailure): the run goes to the dead letter at once, whatever attempts it has
    left (workflow-kill's on_failure parents, chaos/callback_load.py)."""
    deadline = time.monotonic() + float(payload.get("seconds", 0))
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, 0.5))
        ctx.heartbeat()
    raise PermanentFailure("chaos.fail fails for good, on purpose")
