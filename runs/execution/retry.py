"""A job's retry strategy (the job field ``retry``, docs/retries-and-expiry.md): how long
a failed attempt waits before the next, and which exceptions are retried at all.

``retry`` is null (today's backoff) or an object of any of: ``kind`` (fixed, linear,
exponential), ``base_s``, ``cap_s``, ``jitter_s`` (seconds) and ``retry_on`` /
``never_retry_on`` (lists of exception class names). Keys left out take their default
when the attempt fails: exponential, RETRY_BACKOFF_BASE_S, RETRY_BACKOFF_CAP_S, no
jitter, every exception retried. A handler's ``RetryAfter`` and ``PermanentFailure``
win over all of it (runs/execution/transitions.py, fail_runs).

A name in ``retry_on`` / ``never_retry_on`` with a dot is a class's full dotted name
(``requests.exceptions.Timeout``, ``builtins.ValueError``); one without a dot is a class
name in any module (``Timeout``). Either matches the raised exception's class or any class
it derives from (its MRO), so ``OSError`` matches a ``ConnectionResetError``.
"""

import logging
import math
import random
import re

KINDS = ("fixed", "linear", "exponential")
KEYS = ("kind", "base_s", "cap_s", "jitter_s", "retry_on", "never_retry_on")
MAX_DELAY_S = 31_536_000  # a year: any longer and the run is better dead-lettered
MAX_JITTER_S = 86_400
MAX_NAMES = 50
NAME_RE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
NAME_MAX = 200

log = logging.getLogger("scheduler.runs")


def clean(value) -> dict | None:
    """``value`` (the job field ``retry``: None or a dict) checked and normalised: the keys
    given, numbers as floats, lists without repeats. Raises ValueError with the message a
    400 gives for the field ``retry`` (the bad key named)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError("give an object with any of " + ", ".join(KEYS) + ", or null")
    unknown = sorted(str(k) for k in value if k not in KEYS)
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} (known: {', '.join(KEYS)})")
    out: dict = {}
    if "kind" in value:
        if value["kind"] not in KINDS:
            raise ValueError(f"kind: give one of {', '.join(KINDS)}")
        out["kind"] = value["kind"]
    for key, top in (("base_s", MAX_DELAY_S), ("cap_s", MAX_DELAY_S),
                     ("jitter_s", MAX_JITTER_S)):
        if key in value:
            number = value[key]
            if type(number) not in (int, float) or not math.isfinite(number) \
                    or not 0 <= number <= top or math.copysign(1, number) < 0:  # -0.0: a sign slip
                raise ValueError(f"{key}: give a number of seconds from 0 to {top}")
            out[key] = float(number)
    if out.get("cap_s", math.inf) < out.get("base_s", 0):
        raise ValueError("cap_s: must be at least base_s")
    for key in ("retry_on", "never_retry_on"):
        if key in value:
            out[key] = _names(key, value[key])
    both = set(out.get("retry_on", ())) & set(out.get("never_retry_on", ()))
    if both:
        raise ValueError(f"never_retry_on: {sorted(both)[0]!r} is in retry_on too")
    return out


def stored(value, job_id: int | None = None) -> dict | None:
    """A job's stored ``retry`` as fail_runs reads it: clean(value), or None (the default
    strategy) with one warning on the logger ``scheduler.runs`` when the row holds what
    no way in accepts (written to the database by hand, or by an older release). A
    strategy that cannot be read must not stop the reaping of every tenant's runs
    (docs/security.md, "Daemons' fault isolation")."""
    try:
        return clean(value)
    except (ValueError, TypeError) as exc:
        log.warning("job %s: its stored retry strategy is unreadable (%s); the run retries "
                    "with the default backoff", job_id if job_id is not None else "?", exc)
        return None


def _names(key: str, names) -> list[str]:
    if not isinstance(names, list) or len(names) > MAX_NAMES:
        raise ValueError(f"{key}: give a list of at most {MAX_NAMES} exception class names")
    for name in names:
        if not isinstance(name, str) or len(name) > NAME_MAX or not NAME_RE.match(name):
            shown = repr(name) if len(repr(name)) <= 80 else repr(name)[:77] + "..."
            raise ValueError(f"{key}: {shown} is not a class name (ValueError) or a "
                             "dotted one (requests.exceptions.Timeout)")
    return list(dict.fromkeys(names))


def delay_s(policy: dict | None, attempt: int, base_s: float, cap_s: float,
            rng=random) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1-based) under ``policy``
    (a cleaned ``retry`` or None); ``base_s`` and ``cap_s`` are the defaults (the
    RETRY_BACKOFF tunables). fixed: base; linear: base x attempt; exponential:
    base x 2^(attempt-1); each capped at cap, then plus a uniform 0 to jitter_s."""
    policy = policy or {}
    base, cap = policy.get("base_s", base_s), policy.get("cap_s", cap_s)
    kind, n = policy.get("kind", "exponential"), max(attempt, 1)
    if kind == "fixed":
        delay = base
    elif kind == "linear":
        delay = base * n
    else:  # 2**n past ~1000 overflows a float; the cap is reached long before
        delay = base * 2.0 ** min(n - 1, 1000)
    jitter = policy.get("jitter_s", 0.0)
    return min(delay, cap) + (rng.uniform(0, jitter) if jitter else 0.0)


def exception_names(exc: BaseException) -> tuple[str, ...]:
    """The full dotted names of ``exc``'s class and the classes it derives from, most
    specific first, ``object`` left out (``builtins.ValueError``, ``builtins.Exception``,
    ...): what a worker's child reports of a handler's exception (runs/types.py,
    Outcome.retry)."""
    return tuple(f"{kind.__module__}.{kind.__qualname__}" for kind in type(exc).__mro__
                 if kind is not object)


def _matches(entry: str, names: tuple[str, ...]) -> bool:
    if "." in entry:
        return entry in names
    return any(name.rsplit(".", 1)[-1] == entry for name in names)


def refusal(policy: dict | None, names: tuple[str, ...]) -> str | None:
    """Why ``policy`` does not retry an exception whose class and bases are ``names``
    (exception_names), or None when it does: "not retried: ValueError is in
    never_retry_on", "not retried: KeyError is not in retry_on"."""
    if not policy or not names:
        return None
    raised = _shown(names[0])
    for entry in policy.get("never_retry_on", ()):
        if _matches(entry, names):
            how = "is" if _matches(entry, names[:1]) else f"is a {entry},"
            return f"not retried: {raised} {how} in never_retry_on"
    wanted = policy.get("retry_on")
    if wanted and not any(_matches(entry, names) for entry in wanted):
        return f"not retried: {raised} is not in retry_on ({', '.join(wanted)})"
    return None


def _shown(name: str) -> str:
    """A class's dotted name as error texts show it: a builtin's without "builtins."."""
    return name.removeprefix("builtins.")
