"""The run_scheduled index (scheduled_at, id): the run lists' newest-first order
(docs/api.md, "Lists at scale"). On partitioned runs (0010) PostgreSQL builds it on every
partition, the DEFAULT one included, and gives it to every partition created or attached
later (runs/history/time_partitions.py). A plain CREATE INDEX: the runs table takes no writes
while it is built (about a minute for 10 M runs; CONCURRENTLY is refused on a
partitioned table)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("runs", "0010_history_partitions"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["scheduled_at", "id"], name="run_scheduled"),
        ),
    ]
