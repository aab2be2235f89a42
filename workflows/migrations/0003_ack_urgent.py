# The one-call ack (0002) continues no run while a more urgent one waits ready in its
# queue (runs/continuation.py; docs/workflows.md, "Latency"). Two parameters more:
# p_urgent_queues / p_urgent_priorities, the broker's {queue: most urgent waiting
# priority} read by the caller (Redis), or NULL for "read the runs table here" (the
# database broker, whose ready runs are rows: no round trip more); and its candidates go
# in the lease's order (priority, run_at, id), not by id. The body is 0002's with those
# edits, each applied exactly once; 0002's function stays beside it, for the workers of
# the release before during a rolling deploy.

import importlib

from django.db import migrations

BEFORE = importlib.import_module("workflows.migrations.0002_ack_function")

EDITS = [
    ("p_room int, p_ttl_s float8, p_limited text[], p_owner_limited boolean, p_shards int)",
     "p_room int, p_ttl_s float8, p_limited text[], p_owner_limited boolean, p_shards int,\n"
     "    p_urgent_queues text[], p_urgent_priorities int[])"),
    ("SELECT x.id FROM unnest(f_id, f_queue, f_run_at, f_owner) AS x(id, queue, run_at, owner_id)",
     "SELECT x.id FROM unnest(f_id, f_queue, f_run_at, f_owner, f_prio)\n"
     "          AS x(id, queue, run_at, owner_id, priority)"),
    ("        ORDER BY x.id LIMIT GREATEST(p_room, 0));",
     """          -- no more urgent run waits ready in the queue: the lease's order
          AND CASE WHEN p_urgent_queues IS NULL THEN NOT EXISTS (
                SELECT 1 FROM runs_run AS q JOIN jobs_job AS qj ON qj.id = q.job_id
                WHERE q.state = 'queued' AND q.queue = x.queue AND q.priority < x.priority
                  AND qj.status = 'active')
              ELSE NOT EXISTS (
                SELECT 1 FROM unnest(p_urgent_queues, p_urgent_priorities) AS u(queue, prio)
                WHERE u.queue = x.queue AND u.prio < x.priority) END
          -- nor is a more urgent run this ack makes in the queue left to the broker (its
          -- owner's limit): runs/continuation.py, choose
          AND NOT EXISTS (
            SELECT 1 FROM unnest(f_queue, f_run_at, f_owner, f_prio)
              AS y(queue, run_at, owner_id, priority)
            WHERE y.queue = x.queue AND y.priority < x.priority AND y.run_at <= v_now
              AND y.owner_id IS NOT NULL AND (p_owner_limited OR EXISTS (
                SELECT 1 FROM jobs_ownerpolicy AS o
                WHERE o.owner_id = y.owner_id AND o.max_running IS NOT NULL)))
        ORDER BY x.priority, x.run_at, x.id LIMIT GREATEST(p_room, 0));"""),
]


def edited(sql: str, edits=EDITS, by: str = "0003_ack_urgent", of: str = "0002") -> str:
    """``sql`` with each (old, new) of ``edits`` applied once (``by``: the migration
    that edits, ``of``: the one whose body it edits, for the error)."""
    for old, new in edits:
        if sql.count(old) != 1:
            raise RuntimeError(f"{by}: {old[:60]!r} is not in {of}'s body once")
        sql = sql.replace(old, new)
    return sql


ACK = edited(BEFORE.ACK)
NEW_SIGNATURE = ("workflows_ack_succeeded(bigint[], int[], text[], text, text[], int, float8, "
                 "text[], boolean, int, text[], int[])")


def forward(apps, schema_editor):
    # A function of its own beside 0002's, which stays: workers of the previous release
    # call that one until a rolling deploy has replaced them all.
    BEFORE._run(schema_editor, ACK)


def backward(apps, schema_editor):
    BEFORE._run(schema_editor, f"DROP FUNCTION IF EXISTS {NEW_SIGNATURE}")


class Migration(migrations.Migration):

    dependencies = [("workflows", "0002_ack_function")]

    operations = [migrations.RunPython(forward, backward)]
