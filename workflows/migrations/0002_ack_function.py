# Made the one-call ack's functions, workflows_crc32 and workflows_ack_succeeded (its
# first signature). Their bodies now live whole in workflows/sql/, which 0007 applies, so
# this migration does nothing forward: a database that ran it keeps what it made until
# 0007 replaces it. It keeps its name (later migrations and migrated databases know it)
# and its way back, which drops every function the app has. git log -p shows its text.

from django.db import migrations

DROP = """
DROP FUNCTION IF EXISTS workflows_ack_succeeded(bigint[], int[], text[], text, text[], int,
                                                float8, text[], boolean, int, text[], int[]);
DROP FUNCTION IF EXISTS workflows_ack_succeeded(bigint[], int[], text[], text, text[], int,
                                                float8, text[], boolean, int);
DROP FUNCTION IF EXISTS workflows_crc32(text);
"""


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(DROP)


class Migration(migrations.Migration):

    dependencies = [
        ("workflows", "0001_initial"),
        ("runs", "0011_run_scheduled"),
    ]

    operations = [migrations.RunPython(migrations.RunPython.noop, drop)]
