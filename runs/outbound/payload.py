"""The payload of an ``http`` job: checked when the job is created (a 400 naming each bad
field, e.g. ``payload.url``) and again when it runs; secret header values are encrypted
before it is stored (docs/http-handler.md, "Payload").

``http_payload(...)`` builds one from Python: other code that wants a URL called as a run
(retried, visible in the API and the admin) calls it and passes the result to
``jobs.services.create_job("http", payload, ...)``.
"""

import re

import httpx

from runs.outbound import secrets
from scheduler_core import conf
from scheduler_core.exceptions import InvalidJob

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
# Stored encrypted whatever the job says, and never kept from a response.
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie",
                            "x-api-key", "x-auth-token"})
# Set by the client from the URL and the body; a job setting them could aim the request
# elsewhere than the URL the guard checks (Host) or desynchronise the framing.
FORBIDDEN_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection",
                               "upgrade", "te", "trailer", "keep-alive"})
TOKEN_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$")  # RFC 9110 field-name
URL_MAX, HEADERS_MAX, VALUE_MAX = 2048, 50, 8192
DEFAULT_TIMEOUT_S = 10.0
REDACTED = "(encrypted)"  # what the API and the admin show for an encrypted header
KEYS = {"url", "method", "headers", "secret_headers", "encrypted_headers", "json", "body",
        "timeout_s", "success_statuses", "response_headers"}


def url_problem(url) -> str | None:
    """Why ``url`` cannot be an http job's URL, or None: text of at most URL_MAX
    characters, scheme http or https, a host, no user info."""
    if not isinstance(url, str) or not url:
        return "must be an http:// or https:// URL (text)"
    if len(url) > URL_MAX:
        return f"must be at most {URL_MAX} characters"
    try:
        parsed = httpx.URL(url)
        host = parsed.host  # decoded lazily: a bad IDNA label (xn--a-) raises only here
    except (httpx.InvalidURL, ValueError, TypeError) as exc:  # idna's errors are ValueErrors
        return f"is not a valid URL: {exc}"
    if parsed.scheme not in ("http", "https"):
        return f"scheme {parsed.scheme or '(none)'!r} is not allowed: only http and https"
    if not host:
        return "must name a host"
    if parsed.userinfo:
        return "must not carry credentials (user:password@): put them in an Authorization " \
               "header, which is stored encrypted"
    return None


def _names(value, field: str, errors: dict) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(n, str) and TOKEN_RE.match(n)
                                              for n in value):
        errors[field] = "must be a list of header names"
        return []
    return [n.lower() for n in value]


def _headers(payload: dict, errors: dict) -> tuple[dict[str, str], dict[str, str]]:
    """(plain headers, encrypted headers) of ``payload``, the secret ones encrypted."""
    headers, encrypted = payload.get("headers") or {}, payload.get("encrypted_headers") or {}
    if not isinstance(headers, dict) or not isinstance(encrypted, dict):
        errors["payload.headers"] = "must be an object of header name -> text value"
        return {}, {}
    marked = set(_names(payload.get("secret_headers"), "payload.secret_headers", errors))
    plain, sealed = {}, {}
    for name, value in headers.items():
        lower = name.lower()
        if not TOKEN_RE.match(name):
            errors["payload.headers"] = f"{name[:100]!r} is not a valid header name"
        elif lower in FORBIDDEN_HEADERS:
            errors["payload.headers"] = f"{name} is set by the client and cannot be given"
        elif (not isinstance(value, str) or len(value) > VALUE_MAX
              or any(c in value for c in "\r\n\x00")):
            errors["payload.headers"] = (f"{name}: the value must be text of at most "
                                         f"{VALUE_MAX} characters without CR, LF or NUL")
        elif lower in SECRET_HEADERS or lower in marked:
            sealed[name] = secrets.encrypt(value)
        else:
            plain[name] = value
    for name, token in encrypted.items():
        try:
            secrets.decrypt(token)
            sealed[name] = token
        except secrets.Undecryptable as exc:
            errors["payload.encrypted_headers"] = f"{name}: {exc}"
    lowered = [n.lower() for n in [*plain, *sealed]]
    if len(lowered) != len(set(lowered)):
        errors["payload.headers"] = "a header is given twice"
    if len(lowered) > HEADERS_MAX:
        errors["payload.headers"] = f"at most {HEADERS_MAX} headers"
    return plain, sealed


def _statuses(value, errors: dict) -> list[int] | None:
    if value is None:
        return None
    if (not isinstance(value, list) or not value or not all(
            type(s) is int and 100 <= s <= 599 for s in value)):
        errors["payload.success_statuses"] = "must be a non-empty list of status codes 100-599"
        return None
    return sorted(set(value))


def _timeout(value, job_timeout_s: float | None, errors: dict) -> float:
    cap = conf.get("HTTP_MAX_TIMEOUT_S")
    if job_timeout_s:
        cap = min(cap, job_timeout_s)
    if value is None:
        return min(DEFAULT_TIMEOUT_S, cap)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= cap:
        errors["payload.timeout_s"] = (f"must be a number of seconds above 0 and at most {cap:g} "
                                       "(HTTP_MAX_TIMEOUT_S, and the job's timeout_s)")
        return cap
    return float(value)


def normalize(payload: dict, job_timeout_s: float | None = None) -> tuple[dict, dict[str, str]]:
    """Check an http job's ``payload`` (a dict) and return ``(stored payload, errors)``;
    ``errors`` maps a field such as ``payload.url`` to the reason (empty: valid).

    Keys (docs/http-handler.md, "Payload"): url; method (default GET, or POST when a body
    is given); headers (name -> value); secret_headers (names of headers to store
    encrypted, besides SECRET_HEADERS); json (any JSON) or body (text); timeout_s
    (seconds, at most HTTP_MAX_TIMEOUT_S and ``job_timeout_s``; default 10);
    success_statuses (status codes that count as success; default any 2xx);
    response_headers (names of response headers kept in the result; default
    Content-Type). The stored payload has the secret headers' values encrypted under
    ``encrypted_headers`` (encrypted values given there are kept if this deployment can
    decrypt them), so normalising a stored payload again changes nothing.
    """
    errors: dict[str, str] = {}
    unknown = set(payload) - KEYS
    if unknown:
        errors["payload"] = f"unknown keys for the http handler: {', '.join(sorted(unknown))}"
    url = payload.get("url")
    if problem := url_problem(url):
        errors["payload.url"] = problem
    has_body = "json" in payload or payload.get("body") is not None
    method = payload.get("method") or ("POST" if has_body else "GET")
    if not isinstance(method, str) or method.upper() not in METHODS:
        errors["payload.method"] = f"must be one of {', '.join(METHODS)}"
        method = "GET"
    if "json" in payload and payload.get("body") is not None:
        errors["payload.body"] = "give json or body, not both"
    if payload.get("body") is not None and not isinstance(payload["body"], str):
        errors["payload.body"] = "must be text (use json for structured data)"
    plain, sealed = _headers(payload, errors)
    kept = _names(payload.get("response_headers"), "payload.response_headers", errors)
    if SECRET_HEADERS & set(kept):
        errors["payload.response_headers"] = "secret headers (e.g. Set-Cookie) are never kept"
    clean = {"url": url, "method": method.upper() if isinstance(method, str) else method,
             "headers": plain, "encrypted_headers": sealed,
             "timeout_s": _timeout(payload.get("timeout_s"), job_timeout_s, errors),
             "response_headers": kept if payload.get("response_headers") is not None
             else ["content-type"]}
    if "json" in payload:
        clean["json"] = payload["json"]
    elif payload.get("body") is not None:
        clean["body"] = payload["body"]
    statuses = _statuses(payload.get("success_statuses"), errors)
    if statuses is not None:
        clean["success_statuses"] = statuses
    return clean, errors


def http_payload(url: str, *, method: str | None = None, json=None, body: str | None = None,
                 headers: dict[str, str] | None = None, secret_headers=(),
                 timeout_s: float | None = None, success_statuses: list[int] | None = None,
                 response_headers: list[str] | None = None) -> dict:
    """The payload of an ``http`` job calling ``url``, as it is stored (secret headers
    encrypted): pass it to ``jobs.services.create_job("http", payload, ...)``. Arguments
    are normalize()'s keys (``json`` None: no JSON body). Raises InvalidJob naming each
    bad field."""
    spec = {"url": url, "method": method, "headers": headers or {},
            "secret_headers": list(secret_headers), "timeout_s": timeout_s,
            "success_statuses": success_statuses, "response_headers": response_headers}
    if json is not None:
        spec["json"] = json
    if body is not None:
        spec["body"] = body
    clean, errors = normalize({k: v for k, v in spec.items() if v is not None})
    if errors:
        raise InvalidJob(errors)
    return clean


def redacted(payload: dict) -> dict:
    """``payload`` for display (API, admin): each encrypted header's value replaced by
    REDACTED, so not even the ciphertext leaves the database."""
    if not isinstance(payload, dict) or not isinstance(payload.get("encrypted_headers"), dict):
        return payload
    return {**payload, "encrypted_headers": {
        name: REDACTED for name in payload["encrypted_headers"]}}


def origin(url) -> tuple | None:
    """(scheme, host, port) of ``url``, the port filled in from the scheme; None when
    ``url`` is not a URL the handler could call."""
    if url_problem(url):
        return None
    parsed = httpx.URL(url)
    return parsed.scheme, parsed.host, parsed.port or {"http": 80, "https": 443}[parsed.scheme]


def keep_sealed(changed, stored: dict):
    """A changed payload as a client sends it back after reading the redacted one: each
    encrypted header whose value is REDACTED keeps ``stored``'s token of that name (so a
    PATCH or an admin edit need not repeat the secrets); other values are left for
    normalize() to check.

    A stored secret is kept only while the URL's origin (scheme, host, port) is the
    stored one: anyone allowed to change the job could otherwise point it at their own
    server and have the secret sent there. Raises InvalidJob naming each such header,
    whose value must then be given again (docs/http-handler.md, "Secrets")."""
    sealed = changed.get("encrypted_headers") if isinstance(changed, dict) else None
    if not isinstance(sealed, dict) or not isinstance(stored, dict):
        return changed
    old = stored.get("encrypted_headers") or {}
    kept = [name for name, value in sealed.items() if value == REDACTED and name in old]
    if kept and (origin(changed.get("url")) or ()) != origin(stored.get("url")):
        raise InvalidJob({"payload.encrypted_headers": (
            f"{', '.join(kept)}: the URL's origin (scheme, host, port) changed, so the "
            "stored secret is not kept; give its value again in payload.headers")})
    return {**changed, "encrypted_headers": {
        name: old.get(name, value) if value == REDACTED else value
        for name, value in sealed.items()}}
