"""The built-in ``http`` handler (docs/http-handler.md): one request per attempt through
the SSRF guard; the answer's status, chosen headers and a body excerpt are the run's
result.

Retries go through the run's normal path: a connection error, a timeout, 429 or 5xx
raises, so the run is retried with backoff (or after the Retry-After the server gave, up
to HTTP_RETRY_AFTER_MAX_S: RetryAfter); any other status not counted as success raises
PermanentFailure, so the run goes to the dead letter at once.
"""

import json
import logging
import time
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

from jobs.models import Job
from runs import tracing
from runs.outbound import client, guard, secrets
from runs.outbound.payload import SECRET_HEADERS, check_stored, opened, value_problem
from runs.outbound.redact import scrub
from scheduler_core import conf
from scheduler_core.exceptions import PermanentFailure, RetryAfter

# httpx logs every request at INFO ("HTTP Request: ..."), which a worker's child stores on
# the attempt: the handler logs its own line, so one is enough. httpcore's DEBUG lines
# would carry header values.
logging.getLogger("httpx").setLevel(logging.WARNING)
logging.getLogger("httpcore").setLevel(logging.INFO)


class HttpError(Exception):
    """An attempt of the http handler failed in a way worth a retry (connection error,
    timeout, 429, 5xx)."""


def retry_after_s(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds a Retry-After header ``value`` asks for (delay-seconds or an HTTP date),
    never below 0; None when absent or unreadable (RFC 9110, 10.2.3)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max((moment - (now or datetime.now(UTC))).total_seconds(), 0.0)


def excerpt(answer: client.Answer) -> str:
    """The body excerpt as text: UTF-8 (undecodable bytes replaced), NUL characters
    replaced (PostgreSQL's jsonb refuses them)."""
    return answer.body.decode("utf-8", "replace").replace("\x00", "\ufffd")


def result_of(answer: client.Answer, kept: list[str], elapsed_ms: int) -> dict:
    """The run's result (docs/http-handler.md, "Result")."""
    return {
        "status": answer.status,
        "headers": {name: answer.headers[name] for name in kept if name in answer.headers},
        "body": excerpt(answer),
        "body_truncated": answer.truncated,
        "body_encoding": answer.encoding,
        "url": answer.url,
        "redirects": answer.redirects,
        "elapsed_ms": elapsed_ms,
    }


def request_parts(payload: dict, owner_id: int | None) -> tuple[dict[str, str], bytes | None]:
    """The headers to send (secret ones opened for ``owner_id``, the job's owner) and the
    body of a stored, checked payload. Raises PermanentFailure naming a secret header
    that does not open here or whose value cannot be sent (never the value)."""
    headers = dict(payload["headers"])
    try:
        secret = opened(payload, owner_id)
    except (secrets.Undecryptable, secrets.Misbound) as exc:
        raise PermanentFailure(f"a secret header does not open for this job: {exc}") from None
    for name, value in secret.items():
        # Sealed before values were checked this way: h11's refusal would echo the value.
        if problem := value_problem(value):
            raise PermanentFailure(f"secret header {name}: {problem}; give it again")
    headers.update(secret)
    if "json" in payload:
        if not any(n.lower() == "content-type" for n in headers):
            headers["Content-Type"] = "application/json"
        return headers, json.dumps(payload["json"], separators=(",", ":")).encode()
    if "body" in payload:
        return headers, payload["body"].encode("utf-8")
    return headers, None


def failure_text(exc: Exception, headers: dict[str, str]) -> str:
    """What a failed request's error and log line say of ``exc``: its type and message,
    without any of ``headers``' values (h11 and httpx put a refused one in their
    message)."""
    if isinstance(exc, httpx.LocalProtocolError | UnicodeError):
        return f"{type(exc).__name__}: the request could not be sent (a header is not valid)"
    return f"{type(exc).__name__}: {scrub(str(exc), headers.values())}"


async def _owner_id(ctx, payload: dict) -> int | None:
    """The owner of the run's job, which its secrets are sealed for: read only when the
    payload holds sealed secrets (most http jobs, e.g. alert webhooks, hold none)."""
    if not payload.get("encrypted_headers"):
        return None
    return await Job.objects.using(ctx.using).values_list("owner_id", flat=True).aget(
        pk=ctx.job_id)


async def http(ctx, payload: dict) -> dict:
    """Send the request ``payload`` describes (payload.py, normalize) and return the
    result dict; a coroutine, run on its worker child's event loop with the other async
    runs (docs/async-handlers.md). Raises HttpError or RetryAfter (retry),
    PermanentFailure (no retry: a refused address, a bad payload, another status)."""
    owner_id = await _owner_id(ctx, payload)
    payload, errors = check_stored(payload, owner_id)
    if errors:
        raise PermanentFailure("invalid http payload: " + "; ".join(
            f"{field}: {reason}" for field, reason in errors.items()))
    headers, content = request_parts(payload, owner_id)
    tracing.inject(headers)  # the attempt span's traceparent (docs/tracing.md)
    marked = SECRET_HEADERS | {n.lower() for n in payload["encrypted_headers"]}
    began = time.monotonic()
    try:
        answer = await client.send(
            payload["method"], payload["url"], headers=headers, content=content,
            timeout_s=payload["timeout_s"], max_redirects=conf.get("HTTP_MAX_REDIRECTS"),
            max_bytes=conf.get("HTTP_BODY_EXCERPT_BYTES"), secret_names=frozenset(marked))
    except (httpx.RequestError, client.TimedOut, guard.Unresolvable) as exc:
        text = failure_text(exc, headers)
        ctx.logger.warning("http %s %s: %s", payload["method"], payload["url"], text)
        # from None: the chained exception's message and traceback would carry it again.
        raise HttpError(f"{payload['method']} {payload['url']}: {text}") from None
    elapsed_ms = round((time.monotonic() - began) * 1000)
    ctx.logger.info("http %s %s -> %s in %d ms", payload["method"], answer.url,
                    answer.status, elapsed_ms)
    result = result_of(answer, payload["response_headers"], elapsed_ms)
    statuses = payload.get("success_statuses")
    if statuses is None and 200 <= answer.status < 300 or statuses and answer.status in statuses:
        return result
    summary = (f"{payload['method']} {answer.url} answered {answer.status}: "
               f"{json.dumps(result['body'][:500])}")
    if answer.status == 429 or answer.status >= 500:
        wait = retry_after_s(answer.headers.get("retry-after"))
        if wait is not None:
            wait = min(wait, conf.get("HTTP_RETRY_AFTER_MAX_S"))
            raise RetryAfter(wait, f"{summary} (Retry-After: retry in {wait:g} s)")
        raise HttpError(summary)
    raise PermanentFailure(f"{summary} (not retried)")
