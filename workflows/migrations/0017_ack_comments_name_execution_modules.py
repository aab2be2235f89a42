# The one-call ack's comments name the modules where they now live (workflows/execution/,
# runs/execution/leases.py; workflows/sql/ack_succeeded.sql), applied again whole: the
# body PostgreSQL keeps holds the comments too.

from django.db import migrations

from workflows import sql


def forward(apps, schema_editor):
    sql.apply(schema_editor, "ack_succeeded")


class Migration(migrations.Migration):

    dependencies = [("workflows", "0016_backfill_progress_at")]

    operations = [migrations.RunPython(forward, migrations.RunPython.noop)]
