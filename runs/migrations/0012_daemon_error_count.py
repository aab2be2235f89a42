"""DaemonErrorCount: the failures of one item or duty the daemons survived, the counter
behind scheduler_daemon_item_errors_total (runs/daemons/isolation.py)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0011_run_scheduled'),
    ]

    operations = [
        migrations.CreateModel(
            name='DaemonErrorCount',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('daemon', models.CharField(max_length=32)),
                ('duty', models.CharField(max_length=32)),
                ('count', models.BigIntegerField(default=0)),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('daemon', 'duty'), name='daemonerrorcount_once')],
            },
        ),
    ]
