# The one-call ack leaves to the engine a one_failed node below only once no upstream of
# it can still fail (workflows/sql/ack_succeeded.sql), applied again whole.

from django.db import migrations

from workflows import sql


def forward(apps, schema_editor):
    sql.apply(schema_editor, "ack_succeeded")


class Migration(migrations.Migration):

    dependencies = [("workflows", "0009_trigger_rules")]

    operations = [migrations.RunPython(forward, migrations.RunPython.noop)]
