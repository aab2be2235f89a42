"""Whether a handler's result can be stored as its run's JSON result (``result_problem``),
checked in the child that ran the handler, sync or async (runs/worker/child.py,
child_async.py), so the run fails saying what is wrong with its result."""

import json

from scheduler_core.json_text import has_nul

# Ints up to this many bits have fewer digits than json.dumps will write (Python's default
# limit on int -> str conversion is 4,300 digits, about 14,280 bits).
INT_BITS_MAX = 14_000


def result_problem(result) -> str | None:
    """Why ``result`` cannot be stored as the run's JSON result, or None: it must be
    strict JSON (no NaN or Infinity) that PostgreSQL's jsonb accepts (no NUL character,
    no lone surrogate)."""
    if result is None or result is True or result is False or (
            type(result) is int and result.bit_length() < INT_BITS_MAX):
        return None  # most handlers' results: nothing to check (a no-op run's main cost)
    try:
        text = json.dumps(result, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        return f"is not JSON-serialisable: {exc}"
    if has_nul(text):
        return "contains a NUL character (\\u0000), which PostgreSQL cannot store"
    try:
        json.dumps(result, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"is not valid Unicode: {exc}"
    return None
