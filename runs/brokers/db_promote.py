"""The database broker's promote on PostgreSQL in one statement (runs/brokers/database.py):
due delayed runs move to ``queued`` and their queues are notified (runs/brokers/pg_listen.py).

The ORM's form of it (still used on SQLite) took six round trips: a savepoint, the
database clock, the locking SELECT, the UPDATE, the NOTIFY and the release. A worker that
slept to its next run's time pays it before every lease, and at W3's rate (a run due
every 8.6 ms) those leases were the database broker's lag (docs/performance.md).
"""

from django.db import connections

from runs.brokers import pg_listen
from runs.models import DELAYED_STATES, Run, RunState
from scheduler_core import conf, prepared


def promote_pg(using: str, limit: int, shards: list[int] | None = None,
               queues: list[str] | None = None, announce: set[str] = frozenset(),
               within_s: float = 0.0) -> int:
    """Move up to ``limit`` delayed runs due by the database clock to ``queued``, earliest
    ``run_at`` first, skipping rows another transaction holds; only runs of ``shards``
    (None: all; matched modulo SHARDS as runs/execution/transitions.py's in_shards) and
    of ``queues`` (None: all). Notifies the queues of the runs moved and ``announce`` in
    the same statement (at the commit of the caller's transaction, if one is open).
    ``within_s``: also runs due within that many seconds (Broker.promote).
    Returns the number of runs moved. Raises what the database raises."""
    run = Run._meta.db_table
    # The state test is the run_delayed index's condition, in literals: a prepared
    # statement's generic plan uses a partial index only if the text implies its
    # predicate. The UPDATE tests the state again, as the ORM's form did.
    delayed = ", ".join(f"'{state}'" for state in DELAYED_STATES)
    where, params = [], [within_s]
    if shards is not None:
        where.append(f"AND {run}.shard %% %s = ANY(%s::int[])")
        params += [max(conf.get("SHARDS"), 1), list(shards)]
    if queues is not None:
        where.append(f"AND {run}.queue = ANY(%s::text[])")
        params.append(list(queues))
    params += [limit, RunState.QUEUED, sorted(announce)]
    sql = f"""
        WITH due AS (
            SELECT {run}.id FROM {run}
            WHERE {run}.state IN ({delayed})
                  AND {run}.run_at <= clock_timestamp() + %s * interval '1 second'
                  {' '.join(where)}
            ORDER BY {run}.run_at LIMIT %s FOR UPDATE SKIP LOCKED
        ),
        moved AS (
            UPDATE {run} SET state = %s FROM due
            WHERE {run}.id = due.id AND {run}.state IN ({delayed})
            RETURNING {run}.queue
        ),
        told AS (
            {pg_listen.notify_sql("((SELECT array_agg(queue::text) FROM moved) || %s::text[])")}
        )
        SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM told)"""
    with prepared.cursor(connections[using]) as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()[0]
