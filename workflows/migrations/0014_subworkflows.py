# Sub-workflow nodes (docs/workflows.md, "Sub-workflows"): a node's workflow, a node run's
# child workflow run, and the one-call ack (workflows/sql/ack_succeeded.sql) applied again
# whole, as it leaves a sub-workflow node below and a child's end to the engine.

import django.db.models.deletion
from django.db import migrations, models

from workflows import sql


def forward(apps, schema_editor):
    sql.apply(schema_editor, "ack_succeeded")


class Migration(migrations.Migration):

    dependencies = [
        ('workflows', '0013_ack_mapped_nodes'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='noderun',
            name='node_run_running_has_run',
        ),
        migrations.AddField(
            model_name='noderun',
            name='child_run_id',
            field=models.BigIntegerField(blank=True, null=True, unique=True),
        ),
        migrations.AddField(
            model_name='workflownode',
            name='subworkflow',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='used_by', to='workflows.workflow'),
        ),
        migrations.AlterField(
            model_name='workflowrun',
            name='started_by',
            field=models.CharField(choices=[('schedule', 'Schedule'), ('trigger', 'Trigger'), ('api', 'Api'), ('backfill', 'Backfill'), ('workflow', 'Parent')], default='api', max_length=16),
        ),
        migrations.AddConstraint(
            model_name='noderun',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('state', 'running'), _negated=True), ('run_id__isnull', False), ('items__isnull', False), ('child_run_id__isnull', False), _connector='OR'), name='node_run_running_has_run'),
        ),
        migrations.RunPython(forward, migrations.RunPython.noop),
    ]
