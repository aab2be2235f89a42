# The workflows app's database functions applied whole from workflows/sql/ (PostgreSQL;
# nothing elsewhere): what migrations 0002 to 0005 made by editing each other's text,
# written once. On a database that ran them, the same bodies replace themselves, and the
# ten-argument signature becomes a call of the one ack (ack_succeeded_compat.sql). The way
# back leaves them in place; 0002's way back drops them.

from django.db import migrations

from workflows import sql


def forward(apps, schema_editor):
    sql.apply(schema_editor, "crc32", "ack_succeeded", "ack_succeeded_compat")


class Migration(migrations.Migration):

    dependencies = [("workflows", "0006_workflow_cancelled")]

    operations = [migrations.RunPython(forward, migrations.RunPython.noop)]
