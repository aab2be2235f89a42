# The one-call ack stores a trace context on the runs it makes, the traceparent of the
# upstream's ack span (workflows/sql/ack_succeeded.sql, docs/tracing.md "Workflows"): a
# thirteenth argument and a returned column, so a new signature. The twelve-argument one
# becomes a call of it (ack_succeeded_untraced.sql) and the ten-argument one calls it
# directly (ack_succeeded_compat.sql); all three applied again whole.

from django.db import migrations

from workflows import sql


def forward(apps, schema_editor):
    sql.apply(schema_editor, "ack_succeeded", "ack_succeeded_untraced", "ack_succeeded_compat")


class Migration(migrations.Migration):

    dependencies = [("workflows", "0014_subworkflows"), ("runs", "0018_run_trace_context")]

    operations = [migrations.RunPython(forward, migrations.RunPython.noop)]
