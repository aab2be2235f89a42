"""OpenTelemetry spans of a run's life, an optional extra (docs/tracing.md).

Only the OpenTelemetry API is used here; the deployment chooses the SDK and exporter
(``opentelemetry-instrument``, or a TracerProvider set in settings). Without the API
installed, with the TRACING tunable off, or with no tracer provider set, ``on()`` is
False and the callers skip every other function here: the cost per run is that check.

A run carries the W3C ``traceparent`` of the span that made it (its enqueue span) in
``Run.trace_context``; every attempt, lease and ack span of the run is a child of that
context, so a retry, or another worker, continues the same trace. The runs an ack makes
(a workflow's next nodes) store the traceparent of that ack's span (releasing), so a
workflow's nodes are a chain of spans, as its graph is.
"""

import logging
import threading
import time
from contextlib import contextmanager, nullcontext

from scheduler_core import conf

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.trace import (
        NoOpTracerProvider,
        ProxyTracerProvider,
        SpanKind,
        Status,
        StatusCode,
    )
    UNSET = (ProxyTracerProvider, NoOpTracerProvider)  # the API's own: nothing is exported
except ImportError:  # the extra is not installed: on() is always False
    trace = None

log = logging.getLogger("scheduler.tracing")
TRACER_NAME = "django-job-scheduler"
NOTHING = nullcontext()  # what enqueue() gives while tracing is off
# Where a leased run that stores no context may find one: callables (run ids, database
# alias) -> {run id: traceparent}, registered at startup (workflows/execution/tracing.py).
SOURCES: list = []


class _Ack(threading.local):
    """The ack in progress on this thread, while tracing is on: {run id: traceparent of
    the span the runs that ack makes continue} (releasing). A class default rather than
    getattr's: a missing attribute raised and caught inside getattr cost 0.5 µs a call."""

    releasing: dict[int, str] | None = None


_local = _Ack()


# The global tracer provider once found set, and the scheduler's tracer from it (a
# provider, once set, is never replaced: the API refuses; get_tracer costs more than a
# span), and, while none is set, when to look again (time.monotonic()): the API's own
# look reads os.environ, a microsecond on every run (docs/tracing.md, "Turning it off").
_FOUND: list = [None, None, 0.0]
LOOK_EVERY_S = 1.0


def on() -> bool:
    """Whether to make spans: the OpenTelemetry API is installed, a tracer provider other
    than the API's default (no-op, proxy) is set, looked for at most every LOOK_EVERY_S
    seconds until found, and the TRACING tunable is on (docs/tracing.md, "Turning it
    off"). Cheap: the callers ask it on every run."""
    if _FOUND[1] is None:
        now = time.monotonic()
        if trace is None or now < _FOUND[2]:
            return False
        _FOUND[2] = now + LOOK_EVERY_S
        provider = trace.get_tracer_provider()
        if isinstance(provider, UNSET):
            return False
        _FOUND[:2] = [provider, provider.get_tracer(TRACER_NAME)]
    return conf.get("TRACING")


def look_again() -> None:
    """Look for the tracer provider at the next on(), not LOOK_EVERY_S after the last
    look: for a process that has just set one (tests/spans.py)."""
    _FOUND[2] = 0.0


def tracer():
    """The scheduler's tracer (an opentelemetry.trace.Tracer) from the global provider;
    call only when on()."""
    return _FOUND[1]


def current() -> str | None:
    """The W3C traceparent of the current span (str, 55 characters for version 00), or
    None: tracing off, or no valid span current. What a new run stores."""
    if not on():
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier.get("traceparent")


def context_of(traceparent: str | None):
    """The OpenTelemetry Context whose span is the one ``traceparent`` (a W3C traceparent
    string, or None) names: the parent of a run's spans. None or an unreadable value give
    an empty Context (the span starts a trace of its own)."""
    return propagate.extract({"traceparent": traceparent} if traceparent else {})


def traceparent_of(span) -> str:
    """The W3C traceparent (str, 55 characters) naming ``span`` (an OpenTelemetry Span)."""
    c = span.get_span_context()
    return f"00-{c.trace_id:032x}-{c.span_id:016x}-{int(c.trace_flags):02x}"


def releasing(spans: dict[int, str] | None):
    """A context manager: inside it, ``spans`` ({run id: a W3C traceparent}, the acked
    runs' ack spans, or a child's attempt span when it acks its run itself) is what the
    ack on this thread gives the runs it makes (releasing_now: a workflow's next nodes
    store the span of the upstream whose ack made them). None or empty: nothing, at no
    cost."""
    if not spans:
        return NOTHING
    return _releasing(spans)


@contextmanager
def _releasing(spans: dict[int, str]):
    before = _local.releasing
    _local.releasing = spans
    try:
        yield spans
    finally:
        _local.releasing = before


def releasing_now() -> dict[int, str] | None:
    """The ack spans of the ack in progress on this thread (releasing), or None: no ack,
    or tracing off. An attribute read: the ack asks it on every call."""
    return _local.releasing


@contextmanager
def continuing(traceparent: str | None):
    """Make the span ``traceparent`` (a W3C traceparent) names current inside the block,
    so current() gives it to the runs made there (a sub-workflow's child runs, made by
    an ack); None, or tracing off: nothing changes."""
    if traceparent is None or not on():
        yield
        return
    token = otel_context.attach(context_of(traceparent))
    try:
        yield
    finally:
        otel_context.detach(token)


def enqueue(handler: str, jobs: int = 1):
    """A context manager: the enqueue span of ``jobs`` jobs (int) of ``handler`` (str;
    "" for a mix) around their insert, a child of the current span (a request's, the
    caller's); it yields the span (None while tracing is off, when it costs nothing).
    Runs inserted inside it store its traceparent (current())."""
    if not on():
        return NOTHING
    return _enqueue(handler, jobs)


@contextmanager
def _enqueue(handler: str, jobs: int):
    attributes = {"scheduler.jobs": jobs}
    if handler:
        attributes["scheduler.handler"] = handler
    with tracer().start_as_current_span("scheduler.enqueue", kind=SpanKind.PRODUCER,
                                        attributes=attributes) as span:
        yield span


def enqueued(handler: str, job_id: int | None = None, own: bool = False) -> str | None:
    """The traceparent (str) of a new enqueue span of one run of ``handler`` (str), ended
    at once: a child of the current span (a trigger in a request), or with ``own`` a trace
    of its own whatever is current (a cron occurrence: docs/tracing.md, "Runs made
    elsewhere"); ``job_id`` (int), if given, set on it. None while tracing is off."""
    if not on():
        return None
    attributes = {"scheduler.handler": handler, "scheduler.jobs": 1}
    if job_id is not None:
        attributes["scheduler.job_id"] = job_id
    span = tracer().start_span("scheduler.enqueue", kind=SpanKind.PRODUCER,
                               context=otel_context.Context() if own else None,
                               attributes=attributes)
    span.end()
    return traceparent_of(span)


def run_span(name: str, traceparent: str | None, attributes: dict, start_ns: int | None = None,
             kind=None):
    """Start (not as current) span ``name`` (str) of a run whose stored context is
    ``traceparent`` (its parent), with ``attributes`` (dict of str to str/int/bool) and
    start time ``start_ns`` (int, ns since the epoch; None: now). Returns the Span; the
    caller ends it. Call only when on()."""
    return tracer().start_span(name, context=context_of(traceparent), kind=kind or
                               SpanKind.INTERNAL, attributes=attributes, start_time=start_ns)


def fill(tasks: list[dict], using: str) -> None:
    """Give each of ``tasks`` (worker tasks, or lease tasks: dicts with ``trace``) whose
    run stores no context the one a source in SOURCES finds for it (``using``: the
    database alias). Raises nothing: the runs are leased already, and a source that
    fails (a database error) leaves them without a context, logged. Call only when
    on()."""
    missing = {task["run_id"]: task for task in tasks if task.get("trace") is None}
    for source in SOURCES:
        if not missing:
            return
        try:
            found = source(list(missing), using)
        except Exception as exc:  # noqa: BLE001 - a trace must never cost a run
            log.warning("tracing: no trace context for runs %s: %s", sorted(missing)[:20],
                        exc)
            return
        for run_id, traceparent in found.items():
            missing.pop(run_id)["trace"] = traceparent


def leased(tasks: list[dict], worker_id: str, began_ns: int) -> None:
    """Record one lease span per leased run (``tasks``: worker tasks, runs/worker/wire.py),
    a child of the run's stored context, from ``began_ns`` (int, ns since the epoch: the
    lease call's start) to now; ``worker_id`` (str) the leasing worker. Call only when
    on()."""
    for task in tasks:
        run_span("scheduler.lease", task.get("trace"), {
            "scheduler.run_id": task["run_id"], "scheduler.attempt": task["attempt"],
            "scheduler.handler": task["handler"], "scheduler.worker": worker_id},
            began_ns).end()


def begin_acks(outcomes: list) -> list:
    """Start one ack span per outcome of a worker's ack call (``outcomes``: runs.types
    Outcome, each with the task it ran), a child of the run's stored context, now: the
    call's start. Returns them, for ack_spans and acked. Call only when on()."""
    return [run_span("scheduler.ack", (outcome.task or outcome.lease.task or {}).get("trace"),
                     {"scheduler.run_id": outcome.lease.run_id,
                      "scheduler.attempt": outcome.lease.attempt})
            for outcome in outcomes]


def ack_spans(outcomes: list, spans: list) -> dict[int, str]:
    """{run id: traceparent of its ack span} of ``outcomes`` and their ``spans``
    (begin_acks'), for releasing."""
    return {outcome.lease.run_id: traceparent_of(span)
            for outcome, span in zip(outcomes, spans, strict=True)}


def acked(spans: list, outcomes: list, accepted: list[bool] | None, error: str = "") -> None:
    """End the ack ``spans`` (begin_acks') of ``outcomes``, with what the ack stored:
    ``accepted`` (whether each ack applied, a stale lease's is refused; None: the call
    raised ``error``, str), the attempt's outcome and the run's state after it."""
    for outcome, span, ok in zip(outcomes, spans, accepted or [False] * len(spans),
                                 strict=True):
        span.set_attributes({"scheduler.outcome": str(outcome.outcome),
                             "scheduler.accepted": bool(ok),
                             "scheduler.state": outcome.fate or ""})
        if accepted is None:
            span.set_status(Status(StatusCode.ERROR, f"the ack failed: {error}"[:500]))
        elif not ok:
            span.set_status(Status(StatusCode.ERROR, "the lease was stale: ack refused"))
        span.end()


def begin_attempt(task: dict) -> tuple:
    """Start the attempt span of ``task`` (a worker task, runs/worker/wire.py: its
    ``trace`` the run's traceparent) and make it current, so the handler's own spans and
    the http handler's traceparent are its children. Returns the handle end_attempt
    takes. Call only when on()."""
    span = run_span("scheduler.attempt", task.get("trace"), {
        "scheduler.run_id": task["run_id"], "scheduler.job_id": task["job_id"],
        "scheduler.attempt": task["attempt"], "scheduler.handler": task["handler"]},
        kind=SpanKind.CONSUMER)
    # What a workflow's next runs continue when this child acks the run itself
    # (runs/worker/handoff.py): the attempt, as no ack span is made there.
    task["span"] = traceparent_of(span)
    token = otel_context.attach(trace.set_span_in_context(span))
    return span, token


def end_attempt(handle: tuple, ok: bool, error: str = "") -> None:
    """End the attempt span ``handle`` (begin_attempt's): OK when ``ok`` (bool), else
    ERROR with ``error`` (str, the run's error text, its first 500 characters)."""
    span, token = handle
    otel_context.detach(token)
    span.set_attribute("scheduler.outcome", "succeeded" if ok else "failed")
    span.set_status(Status(StatusCode.OK) if ok else Status(StatusCode.ERROR, error[:500]))
    span.end()


def attempt(task: dict, execute) -> tuple:
    """Call ``execute()`` (a worker child's run of ``task``, returning its ``("done",
    run_id, attempt, ok, result, error, ...)`` message: runs/worker/wire.py) inside the
    attempt span of ``task`` (begin_attempt), ended with its outcome; returns the
    message. Call only when on()."""
    handle = begin_attempt(task)
    done = None
    try:
        done = execute()
    finally:
        ok = done is not None and done[3]
        end_attempt(handle, ok, "" if done is None else done[5] or "")
    return done


def inject(headers: dict) -> None:
    """Add the current span's ``traceparent`` (and ``tracestate``, if any) to
    ``headers`` (a dict of str, changed in place) when tracing is on (the http handler's
    request); a header the job gives itself (any case) is kept."""
    if not on():
        return
    given = {name.lower() for name in headers}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    headers.update({k: v for k, v in carrier.items() if k not in given})


def flush(timeout_ms: int = 5000) -> None:
    """Export the spans a process still holds (a worker's child before it exits: its
    os._exit skips the SDK's own flush at exit), waiting at most ``timeout_ms``."""
    if on():
        force_flush = getattr(trace.get_tracer_provider(), "force_flush", None)
        if force_flush is not None:
            force_flush(timeout_ms)
