from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0014_backfill'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='rate_key',
            field=models.CharField(blank=True, db_default='', default='', max_length=255),
        ),
        migrations.AddField(
            model_name='job',
            name='concurrency_key',
            field=models.CharField(blank=True, db_default='', default='', max_length=255),
        ),
        migrations.AddField(
            model_name='job',
            name='concurrency_limit',
            field=models.PositiveIntegerField(db_default=1, default=1),
        ),
    ]
