"""The partial index of the jobs that have an on_success callback, which every batched ack
reads (docs/performance.md, "The ack"). On PostgreSQL it is built CONCURRENTLY, outside a
transaction: a plain CREATE INDEX would hold off every enqueue for the scan of a large
jobs table."""

from django.db import migrations, models

INDEX = models.Index(condition=models.Q(("on_success__isnull", False)), fields=["id"],
                     name="job_on_success")


def create(apps, schema_editor):
    job = apps.get_model("jobs", "Job")
    if schema_editor.connection.vendor == "postgresql":
        quote = schema_editor.quote_name
        schema_editor.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {quote(INDEX.name)} ON "
            f"{quote(job._meta.db_table)} ({quote('id')}) WHERE "
            f"{quote(job._meta.get_field('on_success').column)} IS NOT NULL")
    else:
        schema_editor.add_index(job, INDEX)


def drop(apps, schema_editor):
    job = apps.get_model("jobs", "Job")
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"DROP INDEX CONCURRENTLY IF EXISTS {schema_editor.quote_name(INDEX.name)}")
    else:
        schema_editor.remove_index(job, INDEX)


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
