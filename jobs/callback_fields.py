"""The job fields ``on_success`` and ``on_failure``: the handler run once when a run of
the job succeeds, or ends dead or expired (docs/callbacks.md), checked for every way in by
jobs/validation.py (docs/api.md, "Job fields"). Each is a registered handler's name or
``{"handler": name, "payload": {...}}``, stored as the latter; jobs/callbacks.py makes the
callback runs."""

from collections.abc import Callable

from scheduler_core.exceptions import UnknownHandler
from scheduler_core.registry import get_handler, is_internal

CALLBACK_FIELDS = ("on_success", "on_failure")
KEYS = frozenset({"handler", "payload"})


def clean(value, payload_problem: Callable[[object], str | None]) -> dict | None:
    """``value`` (None, a handler name, or {"handler", "payload"}) as stored: None or
    {"handler": str, "payload": dict}. ``payload_problem`` is jobs/validation.py's check of
    a payload (a JSON object within MAX_PAYLOAD_BYTES). Raises ValueError with the reason:
    an unknown or internal handler (``django_task``), ``http`` (its secrets are sealed per
    job: not offered as a callback), a key other than handler and payload, a bad
    payload."""
    if value is None:
        return None
    if isinstance(value, str):
        value = {"handler": value}
    if not isinstance(value, dict):
        raise ValueError('give a handler name or {"handler": name, "payload": {...}}')
    if unknown := sorted(set(value) - KEYS, key=str):
        raise ValueError(f"unknown key {unknown[0]!r}: give handler and, optionally, "
                         "payload")
    name, payload = value.get("handler"), value.get("payload")
    payload = {} if payload is None else payload
    if not isinstance(name, str) or not name:
        raise ValueError("handler: give a registered handler's name")
    try:
        get_handler(name)
    except UnknownHandler as exc:
        raise ValueError(exc.errors["handler"]) from None
    if is_internal(name) or name == "http":
        raise ValueError(f"the handler {name!r} is not offered as a callback; name a "
                         "handler of yours")
    if problem := payload_problem(payload):
        raise ValueError(f"payload: {problem}")
    return {"handler": name, "payload": payload}


def problems(spec: dict, cleaned: dict,
             payload_problem: Callable[[object], str | None]) -> dict[str, str]:
    """{field: reason} for each bad one of ``spec``'s on_success and on_failure; their
    stored forms go into ``cleaned`` (see clean)."""
    errors: dict[str, str] = {}
    for field in CALLBACK_FIELDS:
        try:
            cleaned[field] = clean(spec.get(field), payload_problem)
        except ValueError as exc:
            errors[field] = str(exc)
    return errors
