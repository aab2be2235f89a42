# The one-call ack (0003, 0004) chooses the runs it continues in time linear in the runs it
# makes: the rule "nor is a more urgent run this ack makes in the queue left to the broker"
# was a NOT EXISTS over every run made, for every run made, each with a probe of the owner
# policies, so a root with 998 downstream nodes compared 998 x 998 pairs: 61-64 ms of its
# 93-96 ms ack (BENCHMARKS.md, "Workflows (W7)"). The runs left to the broker are now read
# once, as the most urgent priority per queue, and each candidate compared with its
# queue's. The same rule, the same signature (CREATE OR REPLACE: a rolling deploy's older
# workers call the same function, with the same answers); 0004's enable_seqscan = off is
# in the definition, since CREATE OR REPLACE resets what ALTER FUNCTION set.

import importlib

from django.db import migrations

BEFORE = importlib.import_module("workflows.migrations.0002_ack_function")
URGENT = importlib.import_module("workflows.migrations.0003_ack_urgent")
INDEX = importlib.import_module("workflows.migrations.0004_ack_index_scans")

EDITS = [
    ("SET plan_cache_mode = force_generic_plan\n",
     "SET plan_cache_mode = force_generic_plan\nSET enable_seqscan = off\n"),
    ("""      v_take := ARRAY(
        SELECT x.id FROM unnest(f_id, f_queue, f_run_at, f_owner, f_prio)
          AS x(id, queue, run_at, owner_id, priority)
        WHERE""",
     """      v_take := ARRAY(
        WITH made AS (
          SELECT * FROM unnest(f_id, f_queue, f_run_at, f_owner, f_prio)
            AS m(id, queue, run_at, owner_id, priority)),
        -- the most urgent priority, per queue, of the runs made due now that a lease would
        -- hold to their owner's limit, which this ack leaves to the broker: read once
        held AS (
          SELECT y.queue, min(y.priority) AS priority FROM made AS y
          WHERE y.run_at <= v_now AND y.owner_id IS NOT NULL AND (p_owner_limited OR EXISTS (
            SELECT 1 FROM jobs_ownerpolicy AS o
            WHERE o.owner_id = y.owner_id AND o.max_running IS NOT NULL))
          GROUP BY y.queue)
        SELECT x.id FROM made AS x
        WHERE"""),
    ("""          AND NOT EXISTS (
            SELECT 1 FROM unnest(f_queue, f_run_at, f_owner, f_prio)
              AS y(queue, run_at, owner_id, priority)
            WHERE y.queue = x.queue AND y.priority < x.priority AND y.run_at <= v_now
              AND y.owner_id IS NOT NULL AND (p_owner_limited OR EXISTS (
                SELECT 1 FROM jobs_ownerpolicy AS o
                WHERE o.owner_id = y.owner_id AND o.max_running IS NOT NULL)))
""",
     """          AND NOT EXISTS (
            SELECT 1 FROM held AS h WHERE h.queue = x.queue AND h.priority < x.priority)
"""),
]


ACK = URGENT.edited(URGENT.ACK, EDITS, by="0005_ack_take_once_per_queue", of="0003")


def forward(apps, schema_editor):
    BEFORE._run(schema_editor, ACK)


def backward(apps, schema_editor):
    URGENT.forward(apps, schema_editor)
    INDEX.forward(apps, schema_editor)


class Migration(migrations.Migration):

    dependencies = [("workflows", "0004_ack_index_scans")]

    operations = [migrations.RunPython(forward, backward)]
