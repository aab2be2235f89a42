# Read the runs the ack leaves to the broker once per queue, by editing 0003's text. The
# function now lives whole in workflows/sql/ack_succeeded.sql, which 0007 applies, so
# this migration does nothing; it keeps its name, which later migrations and migrated
# databases know.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [("workflows", "0004_ack_index_scans")]

    operations = []
