# Added workflows_ack_succeeded's signature with the priority rule (p_urgent_queues,
# p_urgent_priorities) by editing 0002's text. The function now lives whole in
# workflows/sql/ack_succeeded.sql, which 0007 applies, so this migration does nothing;
# it keeps its name, which later migrations and migrated databases know.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [("workflows", "0002_ack_function")]

    operations = []
