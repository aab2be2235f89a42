"""The partial index of the jobs that have an on_success callback, which every batched ack
reads (docs/performance.md, "The ack"). On PostgreSQL it is built CONCURRENTLY, outside a
transaction: a plain CREATE INDEX would hold off every enqueue for the scan of a large
jobs table."""

from django.db import migrations, models

INDEX = models.Index(condition=models.Q(("on_success__isnull", False)), fields=["id"],
                     name="job_on_success")


def _concurrently(schema_editor) -> dict:
    # Only PostgreSQL's schema editor takes (and needs) it.
    return {"concurrently": True} if schema_editor.connection.vendor == "postgresql" else {}


def create(apps, schema_editor):
    schema_editor.add_index(apps.get_model("jobs", "Job"), INDEX,
                            **_concurrently(schema_editor))


def drop(apps, schema_editor):
    schema_editor.remove_index(apps.get_model("jobs", "Job"), INDEX,
                               **_concurrently(schema_editor))


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ("jobs", "0019_backfill_progress_at"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddIndex(model_name="job", index=INDEX)],
            database_operations=[migrations.RunPython(create, drop)],
        ),
    ]
