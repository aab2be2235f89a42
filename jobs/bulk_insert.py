"""Bulk insertion of model rows for the Python API's ingest path (jobs/services.py):
COPY on PostgreSQL, bulk_create elsewhere (BENCHMARKS.md, "Ingest (W1)")."""

from datetime import datetime

from django.db import connections
from django.utils import timezone


def insert_rows(model, objs: list, using: str = "default") -> None:
    """Insert unsaved instances of ``model`` and set their primary keys, as bulk_create
    does (auto_now fields filled, instances marked saved on ``using``).

    On PostgreSQL: one ``nextval`` round trip for all the ids, then one COPY, several
    times faster than bulk_create's multi-row INSERTs (docs/architecture.md, "Measured
    limits behind the design": COPY 200K rows/s against bulk_create's 55K/s). Elsewhere
    (SQLite): bulk_create.
    """
    if not objs:
        return
    connection = connections[using]
    if connection.vendor != "postgresql":
        model.objects.using(using).bulk_create(objs, batch_size=2000)
        return
    meta, quote = model._meta, connection.ops.quote_name
    fields = list(meta.concrete_fields)
    columns = ", ".join(quote(f.column) for f in fields)
    stamp = timezone.now()  # auto_now(_add) fields: one time for the whole batch
    preps = [_copy_prep(f, connection, stamp) for f in fields]
    with connection.cursor() as cursor:
        cursor.execute("SELECT nextval(pg_get_serial_sequence(%s, %s)) "
                       "FROM generate_series(1, %s)", [meta.db_table, meta.pk.column, len(objs)])
        ids = [row[0] for row in cursor.fetchall()]
        with cursor.cursor.copy(f"COPY {quote(meta.db_table)} ({columns}) FROM STDIN") as copy:
            for obj, pk in zip(objs, ids, strict=True):
                obj.pk = pk
                copy.write_row([prep(obj) for prep in preps])
                obj._state.adding, obj._state.db = False, using


# Python types psycopg adapts exactly as Django's get_db_prep_save would on PostgreSQL.
_PLAIN = (str, int, float, bool, type(None))


def _copy_prep(field, connection, stamp: datetime):
    """``obj -> the value to COPY`` for ``field``: Django's own get_db_prep_save,
    short-cut for the plain values that make up most rows (aware datetimes, strings,
    numbers, None), which Django would pass through unchanged. An auto_now(_add) field
    gets ``stamp``, set on the instance as pre_save would."""
    attname, slow = field.attname, field.get_db_prep_save
    if getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
        def prep_stamp(obj):
            setattr(obj, attname, stamp)
            return stamp
        return prep_stamp
    if field.get_internal_type() == "JSONField":
        return lambda obj: slow(getattr(obj, attname), connection)
    if field.get_internal_type() == "DateTimeField":
        def prep_datetime(obj):
            value = getattr(obj, attname)
            if value is None or (isinstance(value, datetime) and value.tzinfo is not None):
                return value
            return slow(value, connection)
        return prep_datetime

    def prep(obj):
        value = getattr(obj, attname)
        return value if isinstance(value, _PLAIN) else slow(value, connection)
    return prep
