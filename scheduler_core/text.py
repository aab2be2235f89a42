"""The one rule for single-line tenant text: names and other fields that end up in an
e-mail header, a log line or a metric label (docs/security.md, "Daemons' fault
isolation").

Control characters are refused at every way in (``line_problem``, used by the job and
workflow validation behind the REST API, the Python API and the admin's forms) and
replaced wherever stored text is put into a header or a line (``one_line``), since rows
stored before the rule, or written by hand, may still hold them. Refused: every C0
control (NUL, TAB, LF, CR, ESC, ...), DEL, every C1 control (NEL among them) and the
Unicode line and paragraph separators. TAB is refused too: a name has no use for it,
and in a header or a log line it is the start of a folded line or a field separator.
"""

import re

# C0 (U+0000-U+001F), DEL (U+007F), C1 (U+0080-U+009F), LINE and PARAGRAPH SEPARATOR.
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def line_problem(value: str) -> str | None:
    """Why text ``value`` (str) cannot be a single-line field, or None when it can. The
    message names the first control character found and its position (0-based), for a
    field error such as ``{"name": line_problem(name)}``."""
    found = CONTROL.search(value)
    if found is None:
        return None
    return (f"must be one line of text without control characters (found "
            f"{ascii(found.group())[1:-1]} at position {found.start()})")


def one_line(text: str, limit: int | None = None) -> str:
    """``text`` (str) with every control character replaced by a space, cut to ``limit``
    characters (None: whole): safe in an e-mail header or a log line whatever a row
    holds."""
    cleaned = CONTROL.sub(" ", text)
    return cleaned if limit is None else cleaned[:limit]
