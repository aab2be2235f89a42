# Set enable_seqscan = off on workflows_ack_succeeded. The setting is now in the function's
# whole text, workflows/sql/ack_succeeded.sql, which 0007 applies, so this migration does
# nothing; it keeps its name, which later migrations and migrated databases know.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [("workflows", "0003_ack_urgent")]

    operations = []
