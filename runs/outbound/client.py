"""One outbound HTTP request through the SSRF guard (docs/http-handler.md): redirects are
followed by hand, at most HTTP_MAX_REDIRECTS, each hop's host checked by guard.check and
connected to through a transport pinned to the checked address; the body is streamed
as it came on the wire (never inflated) and reading stops at the excerpt cap; the
request as a whole is cancelled when it outlives its timeout (asyncio.timeout).

Every outbound request the project makes goes through ``send``, a coroutine: the http
handler is an ``async def`` and many of its runs share a worker child's event loop
(docs/async-handlers.md). The name is resolved and checked in a thread (guard.check,
asyncio.to_thread), so a slow DNS answer never stalls the loop.
"""

import asyncio
from dataclasses import dataclass

import httpx

from runs.outbound import guard
from runs.outbound.transport import PinnedTransport
from scheduler_core.exceptions import PermanentFailure

SCHEMES = {"http": 80, "https": 443}
DEFAULT_HEADERS = {"User-Agent": "django-job-scheduler (http handler)", "Accept": "*/*"}
REDIRECTS = {301, 302, 303, 307, 308}


class TimedOut(Exception):
    """The request as a whole took longer than its timeout (retried)."""


@dataclass
class Answer:
    """The final response of ``send``: status code, headers, the first ``max_bytes`` of
    the body as it came on the wire (``truncated`` when there was more; never inflated,
    ``encoding`` names its Content-Encoding, "identity" when none), the URL that
    answered and how many redirects led there."""

    status: int
    headers: httpx.Headers
    body: bytes
    truncated: bool
    url: str
    redirects: int
    encoding: str = "identity"


def target(url: str | httpx.URL) -> tuple[httpx.URL, str, int]:
    """``url`` parsed, with the host and port to connect to. Raises PermanentFailure for a
    scheme other than http/https, a URL without a host, or user info in the URL."""
    try:
        parsed = httpx.URL(url)
        host = parsed.host  # decoded lazily: a bad IDNA label (xn--a-) raises only here
    except (httpx.InvalidURL, ValueError) as exc:  # e.g. a redirect's garbled Location
        raise PermanentFailure(f"refused: not a valid URL: {exc}") from None
    if parsed.scheme not in SCHEMES:
        raise PermanentFailure(f"refused: scheme {parsed.scheme!r} (only http and https)")
    if not host:
        raise PermanentFailure("refused: the URL has no host")
    if parsed.userinfo:
        raise PermanentFailure("refused: credentials in the URL (use a secret header)")
    return parsed, parsed.raw_host.decode("ascii"), parsed.port or SCHEMES[parsed.scheme]


async def send(method: str, url: str, *, headers: dict[str, str], content: bytes | None,
               timeout_s: float, max_redirects: int, max_bytes: int,
               secret_names: frozenset[str] = frozenset()) -> Answer:
    """Send ``method`` ``url`` with ``headers`` and body ``content``, within ``timeout_s``
    seconds in all (every hop and the body). A redirect (301, 302, 303, 307, 308 with a
    Location) is followed up to ``max_redirects`` times: 303, and 301/302 after a POST,
    become a GET without a body (as browsers and httpx do); the headers named in
    ``secret_names`` (lowercase) are dropped when the redirect leaves the origin.

    Raises guard.Refused (an address the guard refuses), PermanentFailure (a bad URL, or
    more than ``max_redirects`` redirects), guard.Unresolvable, TimedOut and
    httpx.RequestError (connection errors, timeouts: worth a retry).
    """
    # httpcore's timeouts bound each read, not the whole request (headers sent one line
    # at a time restart them): the whole of it is bounded here.
    limit = asyncio.timeout(timeout_s)
    try:
        async with limit:
            return await _send(method, url, headers, content, timeout_s, max_redirects,
                               max_bytes, secret_names)
    except TimeoutError:
        if limit.expired():
            raise TimedOut(_late(timeout_s)) from None
        raise


def _late(timeout_s: float) -> str:
    return f"no complete answer within {timeout_s:g} s (the payload's timeout_s)"


async def _send(method, url, headers, content, timeout_s, max_redirects, max_bytes,
                secret_names) -> Answer:
    if not any(name.lower() == "accept-encoding" for name in headers):
        headers = {"Accept-Encoding": "identity", **headers}  # no decompression bomb
    parsed, host, port = target(url)
    for hop in range(max_redirects + 1):
        addresses = await asyncio.to_thread(guard.check, host, port)
        request = httpx.Request(method, parsed, headers={**DEFAULT_HEADERS, **headers},
                                content=content,
                                extensions={"timeout": httpx.Timeout(timeout_s).as_dict()})
        # The transport alone, not an httpx.AsyncClient: a client parses every
        # redirect's Location itself (a garbled one raising a protocol error) even when
        # it follows none, and would add cookies from one hop to the next.
        async with PinnedTransport(host, port, addresses) as transport:
            response = await transport.handle_async_request(request)
            try:
                location = response.headers.get("location")
                if response.status_code not in REDIRECTS or not location:
                    body, truncated = await read(response, max_bytes)
                    return Answer(response.status_code, response.headers, body, truncated,
                                  str(parsed), hop,
                                  response.headers.get("content-encoding", "identity"))
            finally:
                await response.aclose()
        if hop == max_redirects:
            raise PermanentFailure(f"more than {max_redirects} redirects "
                                   f"(HTTP_MAX_REDIRECTS); the last to {location}")
        try:
            joined = parsed.join(location)
        except httpx.InvalidURL as exc:
            raise PermanentFailure(f"refused: redirect to {location!r}: {exc}") from None
        following, host, port = target(joined)
        if response.status_code == 303 or (response.status_code in (301, 302)
                                           and method == "POST"):
            method, content = ("HEAD" if method == "HEAD" else "GET"), None
            headers = {k: v for k, v in headers.items()
                       if k.lower() not in ("content-type", "content-length")}
        if (following.scheme, following.host, following.port) != (
                parsed.scheme, parsed.host, parsed.port):
            headers = {k: v for k, v in headers.items() if k.lower() not in secret_names}
        parsed = following
    raise AssertionError("unreachable")  # the loop returns or raises


async def read(response: httpx.Response, max_bytes: int) -> tuple[bytes, bool]:
    """The first ``max_bytes`` of ``response``'s body as it came on the wire and whether
    there was more; stops reading (and the connection closes) as soon as the cap is
    passed (send's timeout bounds it).

    The raw bytes, not iter_bytes(): that inflates whatever Content-Encoding the server
    sends (whatever Accept-Encoding asked), each chunk in full before any cap can apply,
    so 1 KB of gzip(gzip(zeros)) became 512 MiB (docs/http-handler.md, "Result")."""
    body = bytearray()
    async for chunk in response.aiter_raw():
        body += chunk
        if len(body) > max_bytes:
            return bytes(body[:max_bytes]), True
    return bytes(body), False
