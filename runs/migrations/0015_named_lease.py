from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0014_run_state_expired'),
    ]

    operations = [
        migrations.CreateModel(
            name='NamedLease',
            fields=[
                ('name', models.CharField(max_length=64, primary_key=True, serialize=False)),
                ('holder', models.CharField(blank=True, default='', max_length=200)),
                ('expires_at', models.DateTimeField(blank=True, null=True)),
            ],
        ),
    ]
