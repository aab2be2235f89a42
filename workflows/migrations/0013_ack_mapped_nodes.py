# The one-call ack leaves a mapped node's item runs, and the acks of nodes with a mapped
# node below, to the engine (workflows/sql/ack_succeeded.sql), applied again whole.

from django.db import migrations

from workflows import sql


def forward(apps, schema_editor):
    sql.apply(schema_editor, "ack_succeeded")


class Migration(migrations.Migration):

    dependencies = [("workflows", "0012_mapped_nodes")]

    operations = [migrations.RunPython(forward, migrations.RunPython.noop)]
