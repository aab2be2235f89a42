from django.db import migrations, models


class Migration(migrations.Migration):
    # db_default: PostgreSQL adds the column without rewriting the runs table, and rows
    # inserted by raw SQL (jobs/schedules/scheduler.py) that do not name it get false.

    dependencies = [
        ("runs", "0007_alerts"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="catch_up",
            field=models.BooleanField(db_default=False, default=False),
        ),
    ]
