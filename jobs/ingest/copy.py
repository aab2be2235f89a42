"""Rows into PostgreSQL by COPY for the bulk create (jobs/ingest/bulk.py): ids for a whole batch
from one ``nextval`` round trip, then one ``COPY … FROM STDIN`` of text lines built by the
caller straight from the validated specs, with no model instance per row (BENCHMARKS.md,
"Ingest (W1)").

The lines are PostgreSQL's COPY text format (tab-separated, ``\\N`` for null, backslash
escapes): ``text`` escapes a value, ``moment`` writes a timestamp.
"""

import re
from collections.abc import Iterable
from datetime import datetime
from itertools import islice

from django.db import connections

NULL = "\\N"
# The characters COPY's text format gives a meaning: backslash, and the row and column
# separators. Anything else (NUL and lone surrogates are refused by validation) goes as is.
_SPECIAL = re.compile(r"[\\\t\n\r]")
_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def text(value: str) -> str:
    """``value`` as one field of a COPY text line."""
    return value.translate(_ESCAPES) if _SPECIAL.search(value) else value


def json_text(compact: str) -> str:
    """Compact JSON text (json.dumps' output: control characters already escaped as
    ``\\n``, ``\\u0001``...) as one COPY field: only its backslashes need doubling."""
    return compact.replace("\\", "\\\\") if "\\" in compact else compact


def moment(value: datetime | None) -> str:
    """An aware datetime as a COPY field (ISO 8601 with its offset, which timestamptz
    reads exactly), or null."""
    return NULL if value is None else value.isoformat()


def next_ids(table: str, count: int, using: str = "default") -> list[int]:
    """``count`` fresh ids of ``table``'s serial primary key ``id``, ascending, in one
    round trip.

    The sequence is looked up once per statement (an InitPlan), not once per id: called
    per row, ``pg_get_serial_sequence`` cost 25 ms of 10,000 ids, a tenth of a W1 batch
    (BENCHMARKS.md, "Ingest (W1)"). Ids taken with no other session's between them come
    back as their bounds alone; otherwise as the whole sorted list."""
    if count < 1:
        return []
    with connections[using].cursor() as cursor:
        cursor.execute(
            "SELECT min(v), max(v), CASE WHEN max(v) - min(v) + 1 = count(*) THEN NULL"
            " ELSE array_agg(v ORDER BY v) END"
            " FROM (SELECT nextval((SELECT pg_get_serial_sequence(%s, 'id')::regclass)) AS v"
            " FROM generate_series(1, %s)) AS taken", [table, count])
        low, high, scattered = cursor.fetchone()
    return list(range(low, high + 1)) if scattered is None else list(scattered)


def copy_lines(table: str, columns: tuple[str, ...], lines: Iterable[str],
               using: str = "default") -> None:
    """COPY ``lines`` (each a full text-format row of ``columns``, ending in a newline)
    into ``table``, sent in chunks of a thousand lines as the iterable yields them, so a
    generator's next lines are made while PostgreSQL inserts the last chunk. Nothing is
    sent for no lines. Raises psycopg's own errors (the COPY runs on the driver's cursor):
    psycopg.IntegrityError for a constraint the rows break."""
    lines = iter(lines)
    chunk = list(islice(lines, 1000))
    if not chunk:
        return
    connection = connections[using]
    quote = connection.ops.quote_name
    names = ", ".join(quote(c) for c in columns)
    with connection.cursor() as cursor:
        with cursor.cursor.copy(f"COPY {quote(table)} ({names}) FROM STDIN") as copy:
            while chunk:
                copy.write("".join(chunk))
                chunk = list(islice(lines, 1000))


def replan_checks(using: str = "default") -> None:
    """Have PostgreSQL plan this session's cached statements again, the foreign-key checks
    it runs at commit included (Django makes them deferred). A session that created a few
    jobs while ``jobs_job`` was analysed empty keeps a check plan that scans the whole
    table, once per new run: a bulk commit of 10,000 runs took 7 to 43 s that way, growing
    with the table, until an autoanalyze replaced the plan (BENCHMARKS.md,
    "Ingest (W1)"). Planned again after the COPY, the check reads the
    primary key."""
    with connections[using].cursor() as cursor:
        cursor.execute("DISCARD PLANS")
