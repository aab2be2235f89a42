from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0016_run_backfill_id'),
    ]

    operations = [
        migrations.CreateModel(
            name='RateLimit',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('scope', models.CharField(choices=[('handler', 'Handler'), ('key', 'Key')], max_length=16)),
                ('name', models.CharField(help_text='a handler, or a rate_key template such as payload.customer_id', max_length=200)),
                ('rate', models.FloatField(help_text='runs started per second, > 0')),
                ('burst', models.FloatField(help_text="the bucket's size in runs, >= 1")),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('scope', 'name'), name='ratelimit_scope_name'), models.CheckConstraint(condition=models.Q(('rate__gt', 0), ('burst__gte', 1)), name='ratelimit_positive')],
            },
        ),
        migrations.CreateModel(
            name='RateLimitBucket',
            fields=[
                ('name', models.CharField(max_length=300, primary_key=True, serialize=False)),
                ('tokens', models.FloatField()),
                ('updated_at', models.DateTimeField()),
            ],
        ),
    ]
