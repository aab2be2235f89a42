"""The payload of an ``http`` job: checked when the job is created (a 400 naming each bad
field, e.g. ``payload.url``) and again when it runs; secret header values are sealed for
the job before it is stored (docs/http-handler.md, "Payload"; docs/security.md,
"Encrypted values"). Clients never send ciphertext: only the redaction marker, which
keeps a secret the job already holds.

``http_payload(...)`` builds one from Python: other code that wants a URL called as a run
(retried, visible in the API and the admin) calls it and passes the result to
``jobs.services.create_job("http", payload, ...)``.
"""

import re

import httpx

from runs.outbound import secrets
from runs.outbound.redact import REDACTED, SEAL, redacted
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
# What h11 sends (no leading or trailing space or tab: its error would echo the value),
# in ASCII (httpx encodes header values as ASCII).
VALUE_RE = re.compile(r"(?:[\x21-\x7e](?:[ \t]*[\x21-\x7e])*)?")
DEFAULT_TIMEOUT_S = 10.0
KEYS = {"url", "method", "headers", "secret_headers", "encrypted_headers", "json", "body",
        "timeout_s", "success_statuses", "response_headers"}


def url_problem(url) -> str | None:
    """Why ``url`` cannot be an http job's URL, or None: text of at most URL_MAX
    characters, scheme http or https, a host, a port (if given) from 1 to 65535, no user
    info."""
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
    # httpx parses any integer as the port; one out of range fails only at run time.
    if parsed.port is not None and not 1 <= parsed.port <= 65535:
        return f"port {parsed.port} is out of range: a port is from 1 to 65535"
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


def value_problem(value) -> str | None:
    """Why ``value`` cannot be sent as a header value, or None: text of at most VALUE_MAX
    characters of printable ASCII (tabs and spaces only inside: h11 refuses a leading or
    trailing one, and its error would echo the value), no control character."""
    if not isinstance(value, str) or len(value) > VALUE_MAX:
        return f"the value must be text of at most {VALUE_MAX} characters"
    if not VALUE_RE.fullmatch(value):
        return ("the value must be printable ASCII without control characters (CR, LF, "
                "NUL), and without spaces or tabs at its start or end")
    return None


def _headers(payload: dict, errors: dict, binding, stored: dict | None
             ) -> tuple[dict[str, str], dict[str, str]]:
    """(plain headers, encrypted headers) of ``payload``: the secret ones sealed for
    ``binding`` (a function of the header name giving a secrets.Binding), the ones sent
    back as REDACTED kept from ``stored`` (the job's stored payload, None for a new
    job)."""
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
        elif problem := value_problem(value):
            errors[f"payload.headers.{name}"] = problem
        elif lower in SECRET_HEADERS or lower in marked:
            sealed[name] = secrets.seal(value, binding(name))
        else:
            plain[name] = value
    given = {n.lower() for n in headers}
    for name, value in encrypted.items():
        field = f"payload.encrypted_headers.{name}"
        if not TOKEN_RE.match(name):  # named in an error key: a header name only
            errors["payload.encrypted_headers"] = f"{name[:100]!r} is not a valid header name"
            continue
        if value == REDACTED and name.lower() in given:
            continue  # a new value in headers replaces the stored one
        if problem := _kept_problem(name, value, payload, stored, binding):
            errors[field] = problem
        else:
            sealed[name] = stored["encrypted_headers"][name]
    lowered = [n.lower() for n in [*plain, *sealed]]
    if len(lowered) != len(set(lowered)):
        errors["payload.headers"] = "a header is given twice"
    if len(lowered) > HEADERS_MAX:
        errors["payload.headers"] = f"at most {HEADERS_MAX} headers"
    return plain, sealed


def _kept_problem(name, value, payload: dict, stored: dict | None, binding) -> str | None:
    """Why ``encrypted_headers[name] = value`` cannot keep the stored secret, or None.
    Clients never send ciphertext: only REDACTED, naming a secret the job holds, while the
    URL's origin is the stored one (whoever may change the job could otherwise point it
    at their own server and have the secret sent there)."""
    if value != REDACTED:
        return (f"takes only {REDACTED!r}, which keeps the job's stored secret of that "
                "name; give a new value in payload.headers (it is encrypted when stored)")
    token = ((stored or {}).get("encrypted_headers") or {}).get(name)
    if not isinstance(token, str):
        return "the job holds no stored secret of that name; give its value in payload.headers"
    if origin(payload.get("url")) != origin(stored.get("url")):
        return ("the URL's origin (scheme, host, port) changed, so the stored secret is "
                "not kept; give its value again in payload.headers")
    try:
        secrets.unseal(token, binding(name))
    except (secrets.Undecryptable, secrets.Misbound) as exc:
        return f"the stored secret cannot be used ({exc}); give its value again in payload.headers"
    return None


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


def normalize(payload: dict, job_timeout_s: float | None = None, *,
              owner_id: int | None = None, stored: dict | None = None
              ) -> tuple[dict, dict[str, str]]:
    """Check an http job's ``payload`` (a dict) and return ``(stored payload, errors)``;
    ``errors`` maps a field such as ``payload.url`` to the reason (empty: valid).

    Keys (docs/http-handler.md, "Payload"): url; method (default GET, or POST when a body
    is given); headers (name -> value); secret_headers (names of headers to store
    encrypted, besides SECRET_HEADERS); json (any JSON) or body (text); timeout_s
    (seconds, at most HTTP_MAX_TIMEOUT_S and ``job_timeout_s``; default 10);
    success_statuses (status codes that count as success; default any 2xx);
    response_headers (names of response headers kept in the result; default
    Content-Type). A header value is printable ASCII without a space or tab at either
    end (``payload.headers.<name>`` names a bad one).

    The stored payload has the secret headers' values sealed under ``encrypted_headers``
    for ``owner_id`` (the job's owner, None for none), the job's seal (SEAL: ``stored``'s,
    or a new one) and the header's name (secrets.Binding). ``stored`` is the job's stored
    payload when it exists (an edit; a run checking its job's payload again passes
    ``redacted(stored)`` as ``payload``): ``encrypted_headers`` takes only REDACTED,
    keeping the stored secret of that name while the URL's origin is unchanged; anything
    else there (ciphertext) is refused under ``payload.encrypted_headers.<name>``.
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
    seal = (stored or {}).get(SEAL)
    seal = seal if isinstance(seal, str) and seal else secrets.new_seal()
    plain, sealed = _headers(payload, errors, lambda name: secrets.Binding(owner_id, seal, name),
                             stored if isinstance(stored, dict) else None)
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
    if sealed:
        clean[SEAL] = seal
    return clean, errors


def http_payload(url: str, *, method: str | None = None, json=None, body: str | None = None,
                 headers: dict[str, str] | None = None, secret_headers=(),
                 timeout_s: float | None = None, success_statuses: list[int] | None = None,
                 response_headers: list[str] | None = None) -> dict:
    """The payload of an ``http`` job calling ``url``, checked, for
    ``jobs.services.create_job("http", payload, ...)``, which seals the secret headers
    for the job it makes (a payload is not sealed before its job exists: a value sealed
    for one job opens in no other). Arguments are normalize()'s keys (``json`` None: no
    JSON body). Raises InvalidJob naming each bad field."""
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
    secret = [name for name in clean["encrypted_headers"]]
    clean["headers"] = {name: value for name, value in (headers or {}).items()
                        if name in clean["headers"] or name in secret}
    clean["encrypted_headers"] = {}
    clean.pop(SEAL, None)
    if secret_headers:
        clean["secret_headers"] = list(secret_headers)
    return clean


def origin(url) -> tuple | None:
    """(scheme, host, port) of ``url``, the port filled in from the scheme; None when
    ``url`` is not a URL the handler could call."""
    if url_problem(url):
        return None
    parsed = httpx.URL(url)
    return parsed.scheme, parsed.host, parsed.port or {"http": 80, "https": 443}[parsed.scheme]


def check_stored(payload: dict, owner_id: int | None) -> tuple[dict, dict[str, str]]:
    """normalize() of a payload as stored (a run checking its job's payload again before
    it sends anything): its secrets must still open for ``owner_id`` (the job's owner),
    the job's seal and their header names, else ``payload.encrypted_headers.<name>``
    says why. Returns (payload, errors) as normalize does."""
    return normalize(redacted(payload), owner_id=owner_id, stored=payload)


def opened(payload: dict, owner_id: int | None) -> dict[str, str]:
    """The secret headers of a stored, checked payload (check_stored), name -> value,
    for the request only. Raises secrets.Undecryptable or secrets.Misbound."""
    seal = payload.get(SEAL) or ""
    return {name: secrets.unseal(token, secrets.Binding(owner_id, seal, name))
            for name, token in payload["encrypted_headers"].items()}
