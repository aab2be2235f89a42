# Trigger rules (workflows/rules.py): each node's rule, the node state ``skipped``, and
# the one-call ack that reads the rules, applied again whole from workflows/sql/.

from django.db import migrations, models

from workflows import sql


def forward(apps, schema_editor):
    sql.apply(schema_editor, "ack_succeeded")


class Migration(migrations.Migration):

    dependencies = [
        ('workflows', '0008_backfill'),
    ]

    operations = [
        migrations.AddField(
            model_name='workflownode',
            name='trigger_rule',
            field=models.CharField(default='all_success', max_length=16),
        ),
        migrations.AlterField(
            model_name='noderun',
            name='state',
            field=models.CharField(choices=[('pending', 'Pending'), ('running', 'Running'), ('succeeded', 'Succeeded'), ('failed', 'Failed'), ('cancelled', 'Cancelled'), ('upstream_failed', 'Upstream Failed'), ('skipped', 'Skipped')], default='pending', max_length=16),
        ),
        migrations.RunPython(forward, migrations.RunPython.noop),
    ]
