"""complete(): the end of attempts recorded in one transaction, the worker's ack
(docs/architecture.md, "Run states and transitions"). Successes are one or two
statements for the whole batch on PostgreSQL; failures go through transitions.fail_runs
(retry with backoff, or the dead letter); log lines are kept on their attempt even when
the outcome is refused as stale.
"""

import json
from datetime import datetime

from django.db import connections, transaction

from runs.clock import db_now
from runs.execution import hooks
from runs.execution.leases import held_runs, int_array, lease_match, one_statement
from runs.execution.transitions import LOG_MESSAGE_MAX, fail_runs, storable
from runs.models import Attempt, AttemptOutcome, LogLine, Run, RunState
from runs.types import Outcome
from scheduler_core import prepared


def _store_logs(attempt_ids: dict[tuple[int, int], tuple[int, datetime]],
                outcomes: list[Outcome], using: str):
    lines = []
    for outcome in outcomes:
        attempt = attempt_ids.get((outcome.lease.run_id, outcome.lease.attempt))
        if attempt is None:
            continue
        attempt_id, run_scheduled_at = attempt
        for created_at, level, logger, message in outcome.logs:
            lines.append(
                LogLine(
                    attempt_id=attempt_id,
                    run_scheduled_at=run_scheduled_at,
                    created_at=created_at,
                    level=level,
                    logger=storable(logger, 200),
                    message=storable(message, LOG_MESSAGE_MAX),
                )
            )
    LogLine.objects.using(using).bulk_create(lines, batch_size=500)


def _succeed(rows: list[tuple[int, int, object]], now: datetime, using: str) -> None:
    """Mark runs ``succeeded`` with their results, and their attempts: ``rows`` are
    ``(run id, attempt, result)`` of runs locked and known to be running under that
    attempt (the UPDATE is fenced on it all the same). On PostgreSQL two statements serve
    the whole batch (an ack per run cost two round trips each, BENCHMARKS.md); elsewhere
    one UPDATE pair per run."""
    if not rows:
        return
    connection = connections[using]
    if connection.vendor != "postgresql":
        runs, attempts = Run.objects.using(using), Attempt.objects.using(using)
        for run_id, number, result in rows:
            runs.filter(pk=run_id, attempt=number, state=RunState.RUNNING).update(
                state=RunState.SUCCEEDED, finished_at=now, result=result,
                lease_expires_at=None, error="",
            )
            attempts.filter(run_id=run_id, number=number).update(
                finished_at=now, outcome=AttemptOutcome.SUCCEEDED, result=result
            )
        return
    # JSONField stores None as SQL NULL and anything else as json.dumps (no encoder).
    values = [[r[0] for r in rows], [r[1] for r in rows],
              [None if r[2] is None else json.dumps(r[2]) for r in rows]]
    batch = "unnest(%s::bigint[], %s::int[], %s::text[]) AS v(id, number, result)"
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Run._meta.db_table} AS r SET state = %s, finished_at = %s, "
            f"result = v.result::jsonb, lease_expires_at = NULL, error = '' FROM {batch} "
            f"WHERE r.id = v.id AND r.attempt = v.number AND r.state = %s",
            [RunState.SUCCEEDED, now, *values, RunState.RUNNING])
        cursor.execute(
            f"UPDATE {Attempt._meta.db_table} AS a SET finished_at = %s, outcome = %s, "
            f"result = v.result::jsonb FROM {batch} "
            f"WHERE a.run_id = v.id AND a.number = v.number",
            [now, AttemptOutcome.SUCCEEDED, *values])


def scheduled_us(outcome: Outcome) -> int | None:
    """The run's ``scheduled_at`` (µs since the epoch, UTC) as its lease's task carries
    it (``scheduled_at_us``; the pipe's task: ``scheduled_at``), or None when no task
    came with the outcome."""
    for task, key in ((outcome.lease.task, "scheduled_at_us"), (outcome.task, "scheduled_at")):
        if task and task.get(key) is not None:
            return task[key]
    return None


def _succeed_only_pg(outcomes: list[Outcome], using: str) -> tuple[list[bool], set[int]]:
    """complete() of a batch of successes without log lines, in one statement (the common
    case of a busy worker; an ack cost six round trips, BENCHMARKS.md): the runs' fenced
    UPDATE, and the attempts of the runs it matched, on one database clock reading. A row
    locked by a concurrent reap is re-checked against the fence after the lock is granted
    (PostgreSQL's EvalPlanQual), as with the FOR UPDATE read of the general path.

    When every outcome's run has its ``scheduled_at`` known (scheduled_us), the rows are
    matched on it too: it is the history tables' partition key, and with it PostgreSQL
    looks each run and attempt up in its own partition only, instead of in each of a
    week's partitions (docs/performance.md, "Partitions and the ack").

    Runs a listener watches (runs/execution/hooks.py: a workflow's nodes) are left alone and
    returned, for the caller to ack in a transaction that tells the listener; found by
    the listener's own SQL test inside the statement, so a batch without one costs
    nothing more. Returns (accepted, the watched run ids, those among them a listener
    other than the one offering its own ack watches: hooks.others_watched_sql)."""
    run, attempt = Run._meta.db_table, Attempt._meta.db_table
    # JSONField stores None as SQL NULL and anything else as json.dumps (no encoder).
    results = [None if o.result is None else json.dumps(o.result) for o in outcomes]
    scheduled = [scheduled_us(o) for o in outcomes]
    pruned = None not in scheduled
    # Array literals, not lists (psycopg dumps a list element by element); with no result
    # in the batch, no array at all: unnest pads the shorter arrays with NULL.
    values = [int_array([o.lease.run_id for o in outcomes]),
              int_array([o.lease.attempt for o in outcomes]),
              *([int_array(scheduled)] if pruned else []),
              results if any(r is not None for r in results) else None]
    # Microseconds to timestamptz, exact: whole seconds and the rest apart, each a float
    # multiple of an interval small enough to be exact (us * 1 microsecond rounds past
    # 2^53 µs, the year 2255, and would miss the row).
    sql = f"""
        WITH t AS (SELECT clock_timestamp() AS now),
        v AS (SELECT u.id, u.number{{at}}, u.result
              FROM unnest(%s::bigint[], %s::int[]{{us}}, %s::text[])
                   AS u(id, number{{us_name}}, result)),
        done AS (
            UPDATE {run} AS r SET state = %s, finished_at = t.now, result = v.result::jsonb,
                lease_expires_at = NULL, error = ''
            FROM v, t
            WHERE r.id = v.id AND r.attempt = v.number AND r.state = %s{{run_at}}{{skip}}
            RETURNING r.id, r.attempt, r.scheduled_at, r.finished_at, v.result
        ),
        attempts AS (
            UPDATE {attempt} AS a SET finished_at = done.finished_at, outcome = %s,
                result = done.result::jsonb
            FROM done WHERE a.run_id = done.id AND a.number = done.attempt{{attempt_at}}
        )
        SELECT id, attempt, false, false FROM done{{also}}"""
    watched_sql = hooks.watched_sql
    sql = sql.format(
        us=", %s::bigint[]" if pruned else "", us_name=", us" if pruned else "",
        at=", timestamptz 'epoch' + (u.us / 1000000) * interval '1 second' "
        "+ (u.us %% 1000000) * interval '1 microsecond' AS at" if pruned else "",
        run_at=" AND r.scheduled_at = v.at" if pruned else "",
        attempt_at=" AND a.run_scheduled_at = done.scheduled_at" if pruned else "",
        skip=f" AND NOT {watched_sql('r.id')}" if hooks.watching() else "",
        also=f" UNION ALL SELECT v.id, v.number, true, {hooks.others_watched_sql('v.id')} "
        f"FROM v WHERE {watched_sql('v.id')}" if hooks.watching() else "")
    # Prepared on a direct session: it was planned at every call, about 4 ms of a batch
    # of 500 (docs/performance.md, "The ack").
    with prepared.cursor(connections[using]) as cursor:
        cursor.execute(sql, [*values, RunState.SUCCEEDED, RunState.RUNNING,
                             AttemptOutcome.SUCCEEDED])
        rows = cursor.fetchall()
    applied = {(r[0], r[1]) for r in rows if not r[2]}
    return ([(o.lease.run_id, o.lease.attempt) in applied for o in outcomes],
            {r[0] for r in rows if r[2]}, {r[0] for r in rows if r[3]})


def _refuse_results(outcomes: list[Outcome], watched: set[int]) -> None:
    """A watched run's success whose result a listener refuses (a workflow node's result
    over WORKFLOW_MAX_RESULT_BYTES) becomes a failed attempt that sends the run to the
    dead letter: a retry would return the same result."""
    for o in outcomes:
        if o.outcome == AttemptOutcome.SUCCEEDED and o.lease.run_id in watched:
            reason = hooks.refuse_result(o.lease.run_id, o.result)
            if reason:
                o.outcome, o.result, o.error, o.retry = AttemptOutcome.FAILED, None, reason, False


def complete(outcomes: list[Outcome], using: str) -> tuple[list[bool], list[int]]:
    """Record the end of each attempt in ``outcomes`` in one transaction.

    Success moves the run to ``succeeded`` with its result; any other outcome goes through
    ``fail_runs`` (retry with backoff, or dead after max_attempts). Every change is fenced
    on (run id, attempt, state running): a stale worker's outcome changes nothing, but its
    log lines are still kept on its attempt. Returns ``(accepted, retried_ids)``:
    ``accepted[i]`` tells whether ``outcomes[i]`` was applied.
    """
    if not outcomes:
        return [], []
    # Runs an app above the engine follows (a workflow's nodes: runs/execution/hooks.py) are acked
    # in a transaction that tells it, so what it does (the downstream runs) commits with
    # the ack. Known before the ack: a run is watched from its creation on.
    # Runs the worker knows are watched (continued on it, runs/execution/continuation.py) skip the
    # one statement that would only hand them on, and the read that would find them.
    known = {o.lease.run_id for o in outcomes if o.watched}
    plain = one_statement(using) and all(
        o.outcome == AttemptOutcome.SUCCEEDED and not o.logs for o in outcomes)
    if plain and len(known) == len(outcomes):
        # Made and continued by the one-call ack's listener (workflow nodes): no other
        # listener watches them (jobs/callbacks.py's watch jobs with on_success, which no
        # node has).
        accepted = _listener_ack(outcomes, using)
        if accepted is not None:
            return accepted, []
    elif plain and not known:
        accepted, watched, others = _succeed_only_pg(outcomes, using)
        if not watched:
            return accepted, []
        held = [i for i, o in enumerate(outcomes) if o.lease.run_id in watched]
        batch = [outcomes[i] for i in held]
        again, retried = None if others else _listener_ack(batch, using), []
        if again is None:
            again, retried = _complete(batch, using, watched)
        for i, ok in zip(held, again, strict=True):
            accepted[i] = ok
        return accepted, retried
    return _complete(outcomes, using, known | hooks.watched(
        [o.lease.run_id for o in outcomes if o.lease.run_id not in known], using))


def _listener_ack(outcomes: list[Outcome], using: str) -> list[bool] | None:
    """The listener's own ack (runs/execution/hooks.py, ack_successes: a workflow's nodes in one
    round trip on PostgreSQL) of ``outcomes``, successes of runs it watches and no other
    listener does; None when a result is refused (the attempt fails) or the listener
    leaves them to _complete."""
    _refuse_results(outcomes, {o.lease.run_id for o in outcomes})
    if any(o.outcome != AttemptOutcome.SUCCEEDED for o in outcomes):
        return None
    return hooks.ack_successes(outcomes, using, checked=True)


def _complete(outcomes: list[Outcome], using: str,
              watched: set[int]) -> tuple[list[bool], list[int]]:
    """complete()'s general path: one transaction; ``watched`` are the runs among them a
    listener follows (runs/execution/hooks.py)."""
    if watched:
        _refuse_results(outcomes, watched)
        for o in outcomes:
            o.watched = o.lease.run_id in watched
    accepted: list[bool] = []
    with transaction.atomic(using=using):
        now = db_now(using)
        attempts = Attempt.objects.using(using)
        live = held_runs([o.lease for o in outcomes], using, "max_attempts")
        failed: dict[str, list] = {}
        errors: dict[int, str] = {}
        asked: dict[int, float | bool | None] = {}
        retried: list[int] = []
        succeeded: list[tuple[int, int, object]] = []
        for o in outcomes:
            key = (o.lease.run_id, o.lease.attempt)
            ok = key in live
            accepted.append(ok)
            if not ok:
                continue
            if o.outcome == AttemptOutcome.SUCCEEDED:
                succeeded.append((key[0], key[1], o.result))
            else:
                failed.setdefault(o.outcome, []).append((key[0], key[1], live[key][0]))
                errors[key[0]] = o.error
                asked[key[0]] = o.retry
        _succeed(succeeded, now, using)
        hooks.notify(hooks.SUCCEEDED, [r[0] for r in succeeded if r[0] in watched], now,
                     using)
        fates: dict[int, str] = {}
        for outcome, rows in failed.items():
            retried += fail_runs(rows, outcome, errors, now, using, fates, asked)
        for o, ok in zip(outcomes, accepted, strict=True):
            if ok:
                o.fate = fates.get(o.lease.run_id, "succeeded")
        if not any(o.logs for o in outcomes):
            return accepted, retried
        attempt_ids = {
            (a[1], a[2]): (a[0], a[3])
            for a in attempts.filter(
                lease_match((o.lease for o in outcomes), "run_id", "number")
            ).values_list("id", "run_id", "number", "run_scheduled_at")
        }
        _store_logs(attempt_ids, outcomes, using)
    return accepted, retried
