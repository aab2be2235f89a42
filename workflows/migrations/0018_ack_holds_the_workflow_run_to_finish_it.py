# The one-call ack holds a workflow run's row before it asks whether any node is left
# (workflows/sql/ack_succeeded.sql, step 7): two acks of its last two nodes at once each
# saw the other's node running and neither ended it.

from django.db import migrations

from workflows import sql


def forward(apps, schema_editor):
    sql.apply(schema_editor, "ack_succeeded")


class Migration(migrations.Migration):

    dependencies = [("workflows", "0017_ack_comments_name_execution_modules")]

    operations = [migrations.RunPython(forward, migrations.RunPython.noop)]
