"""ChildRecycleCount: worker children replaced by recycling, per reason, the counter
behind scheduler_worker_child_recycles_total (runs/worker/recycle.py)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0012_daemon_error_count'),
    ]

    operations = [
        migrations.CreateModel(
            name='ChildRecycleCount',
            fields=[
                ('reason', models.CharField(max_length=16, primary_key=True, serialize=False)),
                ('count', models.BigIntegerField(default=0)),
            ],
        ),
    ]
