"""The built-in handlers. ``http`` (runs/outbound/handler.py, docs/http-handler.md) is
registered always: it is a production handler, every outbound request behind the SSRF
guard.

The demo handlers: noop, echo, sleep, flaky and always_fails, for the demo, the tests
and the benchmarks. They are registered only when the setting DEMO_HANDLERS is on
(``SCHEDULER_DEMO_HANDLERS=true``; scripts/demo, the test settings and the benchmarks
turn it on), never by default: in a production deployment any user of the API could
otherwise keep workers busy with ``sleep`` (docs/isolation.md, "Tenant bounds"). The
fault-test handlers (busy_loop, suicide) live in the fault-injection app, chaos/handlers.py.

Each takes ``(ctx, payload)``; ``payload`` keys are documented per handler.
"""

import asyncio
import importlib
import logging
import time
import zlib

from scheduler_core import conf
from scheduler_core.registry import handler

log = logging.getLogger(__name__)


class HandlerFailure(Exception):
    """A built-in handler failed on purpose (flaky, always_fails)."""


def noop(ctx, payload):
    """Do nothing; returns None."""
    return None


def echo(ctx, payload):
    """Log the payload and return it (the demo crontab's handler: the payload holds the
    original crontab command line)."""
    ctx.logger.info("echo %s", payload)
    return payload


def sleep(ctx, payload):
    """Sleep ``payload["seconds"]`` (float, default 1) in steps, heartbeating each step."""
    seconds = float(payload.get("seconds", 1))
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, 1.0))
        ctx.heartbeat()
    ctx.logger.info("slept %.3f s", seconds)
    return {"slept_s": seconds}


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


def always_fails(ctx, payload):
    """Raise on every attempt, so the run ends in the dead letter."""
    ctx.logger.error("about to fail (attempt %s)", ctx.attempt)
    raise HandlerFailure(payload.get("message", "always_fails always fails"))


DEMO = {"noop": noop, "echo": echo, "sleep": sleep, "flaky": flaky,
        "always_fails": always_fails}


OUTBOUND = "runs.outbound.handler"
_sender = []  # runs/outbound/handler.py's http, once imported


async def http(ctx, payload: dict) -> dict:
    """The built-in ``http`` handler: runs/outbound/handler.py's ``http``, imported at its
    first run. httpx, httpcore and cryptography took about 0.1 s of every process's start,
    a worker's included, that never sends a request (docs/performance.md, "A worker's
    start"). The import runs in a thread: a child's other async runs go on meanwhile."""
    if not _sender:
        _sender.append((await asyncio.to_thread(importlib.import_module, OUTBOUND)).http)
    return await _sender[0](ctx, payload)


handler("http")(http)

# Read once, when the apps load (jobs.apps -> registry.autodiscover): the workers and the
# web process must agree, so the setting belongs to the deployment, not to a request.
if conf.get("DEMO_HANDLERS"):
    for _name, _fn in DEMO.items():
        handler(_name)(_fn)
