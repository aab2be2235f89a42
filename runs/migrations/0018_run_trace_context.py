from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0017_rate_limit'),
    ]

    operations = [
        migrations.AddField(
            model_name='run',
            name='trace_context',
            field=models.CharField(blank=True, max_length=128, null=True),
        ),
    ]
