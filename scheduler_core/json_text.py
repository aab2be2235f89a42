"""Checks on JSON text about to be stored in a PostgreSQL jsonb column, shared by the job
payloads (jobs/validation.py) and the handlers' results (runs/worker/results.py)."""

ESCAPED_NUL = "\\u0000"  # how json.dumps writes U+0000, ensure_ascii or not


def has_nul(text: str) -> bool:
    """Whether the JSON text ``text`` (json.dumps's) holds a NUL character (U+0000) in a
    string or a key, which jsonb refuses. ``\\u0000`` in the text is one only when its
    backslash is not itself escaped: the six characters backslash, "u0000" (a Windows
    path's "C:\\u0000dir") are written ``\\\\u0000``. Costs a substring search, and a
    look at the backslashes before each ``\\u0000`` found; no walk of the decoded value
    (results are checked on the worker's hot path; a deep payload's walk hit Python's
    recursion limit)."""
    at = text.find(ESCAPED_NUL)
    while at >= 0:
        start = at
        while start and text[start - 1] == "\\":
            start -= 1
        if (at - start) % 2 == 0:  # those escape each other: this one starts \u0000
            return True
        at = text.find(ESCAPED_NUL, at + len(ESCAPED_NUL))
    return False
