"""The workflows app's database functions, one whole ``.sql`` file each in this folder
(PostgreSQL only; other databases have none and take the ORM path).

A migration applies a file in full with ``apply``, never an edit of another migration's
text. To change a function: edit its file and add a migration that applies it again
(CREATE OR REPLACE), so a database migrated before gets the new body and a fresh one
gets it from the first migration that applies the file. Its arguments or returned
columns cannot change that way: that is a new signature, beside the old one while a
rolling deploy's older workers may call it (ack_succeeded_compat.sql).
"""

from pathlib import Path

SQL_DIR = Path(__file__).parent


def text(name: str) -> str:
    """The whole text of ``name``.sql in this folder (``name``: str, without the
    suffix). Raises FileNotFoundError when there is no such file (a package built
    without its ``*.sql`` package data)."""
    return (SQL_DIR / f"{name}.sql").read_text()


def apply(schema_editor, *names: str) -> None:
    """Run the files ``names`` (str, without the suffix), in the order given, on
    ``schema_editor``'s connection if it is PostgreSQL; nothing elsewhere. Each file is
    sent as it is, without parameters (the bodies have % signs of their own). Raises
    what the database raises."""
    texts = [text(name) for name in names]  # a missing file fails on every database
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        for sql in texts:
            cursor.execute(sql)
