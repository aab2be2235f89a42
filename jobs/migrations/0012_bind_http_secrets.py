"""Bind the stored secret headers of http jobs to their job (owner, a new seal of the
job, header name): before, a token opened in any job. Tokens no key of this
deployment opens, and tokens copied between owners' jobs, are left as they are: those
jobs' runs fail naming the header until its value is given again. Re-run at any time
with ``manage.py rotatehttpsecrets``."""

from django.db import migrations

from runs.outbound.reseal import reseal


def bind(apps, schema_editor):
    reseal(apps.get_model("jobs", "Job"), using=schema_editor.connection.alias)


class Migration(migrations.Migration):

    dependencies = [
        ("jobs", "0011_job_unique_lock_partial"),
    ]

    operations = [
        migrations.RunPython(bind, migrations.RunPython.noop, elidable=True),
    ]
