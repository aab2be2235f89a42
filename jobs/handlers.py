"""Built-in handlers for demos, tests and benchmarks (docs/architecture.md, "Handlers").

Each takes ``(ctx, payload)``; ``payload`` keys are documented per handler.
"""

import logging
import os
import signal
import time
import zlib

from jobs.registry import handler

log = logging.getLogger(__name__)


class HandlerFailure(Exception):
    """A built-in handler failed on purpose (flaky, always_fails)."""


@handler("noop")
def noop(ctx, payload):
    """Do nothing; returns None."""
    return None


@handler("echo")
def echo(ctx, payload):
    """Log the payload and return it (the demo crontab's handler: the payload holds the
    original crontab command line)."""
    ctx.logger.info("echo %s", payload)
    return payload


@handler("sleep")
def sleep(ctx, payload):
    """Sleep ``payload["seconds"]`` (float, default 1) in steps, heartbeating each step."""
    seconds = float(payload.get("seconds", 1))
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, 1.0))
        ctx.heartbeat()
    ctx.logger.info("slept %.3f s", seconds)
    return {"slept_s": seconds}


@handler("flaky")
def flaky(ctx, payload):
    """Fail a fraction of attempts.

    ``payload["fail_rate"]`` (0..1, default 0.5) is the fraction of attempts that fail,
    decided deterministically from (run id, attempt) so a retry can succeed.
    ``payload["fail_first"]`` (int), when given, instead fails exactly the first N
    attempts: the demo uses 3 to show retries after 1 s, 2 s and 4 s.
    """
    fail_first = payload.get("fail_first")
    if fail_first is not None:
        failing = ctx.attempt <= int(fail_first)
    else:
        rate = float(payload.get("fail_rate", 0.5))
        bucket = zlib.crc32(f"{ctx.run_id}:{ctx.attempt}".encode()) % 10_000
        failing = bucket < rate * 10_000
    if failing:
        ctx.logger.warning("attempt %s fails on purpose", ctx.attempt)
        raise HandlerFailure(f"flaky: attempt {ctx.attempt} failed on purpose")
    ctx.logger.info("attempt %s succeeds", ctx.attempt)
    return {"attempt": ctx.attempt}


@handler("always_fails")
def always_fails(ctx, payload):
    """Raise on every attempt, so the run ends in the dead letter."""
    ctx.logger.error("about to fail (attempt %s)", ctx.attempt)
    raise HandlerFailure(payload.get("message", "always_fails always fails"))


@handler("busy_loop")
def busy_loop(ctx, payload):
    """Spin the CPU without ever returning (tests the timeout of a stuck handler)."""
    while True:
        pass


@handler("suicide")
def suicide(ctx, payload):
    """Kill the process running it (tests a poison run)."""
    os.kill(os.getpid(), signal.SIGKILL)
