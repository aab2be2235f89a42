"""The one rule for single-line tenant text: names and other fields that end up in an
e-mail header, a log line, a metric label or the admin (docs/security.md, "Daemons' fault
isolation").

Refused at every way in (``line_problem``, used by the job and workflow validation behind
the REST API, the Python API and the admin's forms), and neutralised wherever stored text
is put into a header or a line (``one_line``), since rows stored before the rule, or
written by hand, may still hold them:

- control characters: every C0 control (NUL, TAB, LF, CR, ESC, ...), DEL, every C1
  control (NEL among them) and the Unicode line and paragraph separators. TAB is refused
  too: a name has no use for it, and in a header or a log line it is the start of a
  folded line or a field separator. ``one_line`` replaces them with a space.
- format characters (Unicode category Cf) but two: the direction controls (U+202A-U+202E,
  U+2066-U+2069, U+200E, U+200F, U+061C) make "nightly\\u202egpj.exe" show as
  "nightlyexe.jpg"; the invisible ones (U+200B, U+2060-U+2064, U+FEFF, the soft hyphen
  U+00AD, the tag characters U+E0000-U+E007F, ...) make two names that look the same
  differ, or hide text. ``one_line`` drops them. Kept: U+200C ZERO WIDTH NON-JOINER and
  U+200D ZERO WIDTH JOINER, which Persian and Indic scripts need for their spelling and
  emoji sequences (👩‍💻) for their shape; alone they change neither direction nor
  what text says. Lost with the tag characters: the subdivision flags (England's).
"""

import re
import unicodedata

# C0 (U+0000-U+001F), DEL (U+007F), C1 (U+0080-U+009F), LINE and PARAGRAPH SEPARATOR.
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# Format characters that spelling and emoji need (see the module's docstring).
KEPT_FORMAT = frozenset("\u200c\u200d")


def _is_format(char: str) -> bool:
    return unicodedata.category(char) == "Cf" and char not in KEPT_FORMAT


def _first_format(value: str) -> int | None:
    if value.isascii():  # no format character below U+0080: skip the walk
        return None
    return next((i for i, char in enumerate(value) if _is_format(char)), None)


def line_problem(value: str) -> str | None:
    """Why text ``value`` (str) cannot be a single-line field, or None when it can: it
    holds a control character or a format character other than ZWNJ and ZWJ (the
    module's docstring says which and why). The message names the first one found and
    its position (0-based), for a field error such as ``{"name": line_problem(name)}``."""
    found = CONTROL.search(value)
    control_at = found.start() if found else None
    format_at = _first_format(value[:control_at])
    if format_at is not None:
        char = value[format_at]
        return (f"must be one line of text without control characters or invisible or "
                f"direction-changing characters (found U+{ord(char):04X} "
                f"{unicodedata.name(char, 'FORMAT CHARACTER')} at position {format_at})")
    if found is None:
        return None
    return (f"must be one line of text without control characters (found "
            f"{ascii(found.group())[1:-1]} at position {found.start()})")


def one_line(text: str, limit: int | None = None) -> str:
    """``text`` (str) with every control character replaced by a space and every format
    character line_problem refuses dropped, cut to ``limit`` characters (None: whole):
    safe in an e-mail header or a log line, and showing what it says, whatever a row
    holds."""
    cleaned = CONTROL.sub(" ", text)
    if not cleaned.isascii():
        cleaned = "".join(char for char in cleaned if not _is_format(char))
    return cleaned if limit is None else cleaned[:limit]
