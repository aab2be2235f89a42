"""Callbacks (docs/callbacks.md): a job's ``on_success`` handler runs once each time a run
of the job succeeds, its ``on_failure`` handler once when a run ends dead or expired.

The callback is a one-off job of its own with one run, made by a run listener
(runs/execution/hooks.py) in the transaction that ends the parent run: the worker's ack,
the move to the dead letter, the expiry. Either both commit or neither does, and the
jobs' UNIQUE (callback_of, callback_on) makes a second callback for the same run and
outcome impossible, whatever retries the ack: the mechanism of the workflow engine's
downstream runs (docs/workflows.md, "The rules"). The callback job runs with the parent
job's owner, queue, priority, timeout_s, max_attempts and retry strategy, so it is leased,
retried, dead-lettered and requeued like any run; its payload is the callback's payload
with the key ``callback`` set to what happened to the parent run.
"""

from datetime import datetime

from jobs.models import Job
from runs import tracing
from runs.brokers import get_broker
from runs.brokers.shards import shard_of
from runs.execution import hooks
from runs.models import Run
from runs.types import RunRef
from scheduler_core import conf

SUCCESS, FAILURE = "on_success", "on_failure"
_RUNS, _JOBS = Run._meta.db_table, Job._meta.db_table


class CallbackListener(hooks.RunListener):
    """Makes the callback runs. Watches the runs whose job has ``on_success`` (dead and
    expired runs are told to every listener), so a plain ack of a job without one costs
    one indexed lookup in the ack's own statement. A watched run's result is held to
    WORKFLOW_MAX_RESULT_BYTES by the workflow listener's refuse_result, which every
    watched run meets (docs/callbacks.md)."""

    def watched(self, run_ids: list[int], using: str) -> set[int]:
        return set(Run.objects.using(using).filter(
            pk__in=run_ids, job__on_success__isnull=False).values_list("pk", flat=True))

    def watched_sql(self, run_id: str) -> str:
        return (f"EXISTS (SELECT 1 FROM {_RUNS} AS cr JOIN {_JOBS} AS cj "
                f"ON cj.id = cr.job_id WHERE cr.id = {run_id} "
                "AND cj.on_success IS NOT NULL)")

    def changed(self, event: str, run_ids: list[int], now, using: str) -> None:
        if event == hooks.SUCCEEDED:
            make_callbacks(run_ids, SUCCESS, now, using)
        elif event in (hooks.DEAD, hooks.EXPIRED):
            make_callbacks(run_ids, FAILURE, now, using)


def make_callbacks(run_ids: list[int], kind: str, now: datetime, using: str) -> list[int]:
    """Make, inside the caller's transaction, the ``kind`` (SUCCESS or FAILURE) callback
    job and run of each run of ``run_ids`` whose job has one and that has none yet;
    ``now`` (the database clock) is the runs' scheduled_at. The runs reach the broker
    after the commit. Returns the new runs' ids. Raises IntegrityError when a concurrent
    transaction made one of them (never, since the parent run is locked by its own
    change; the caller's savepoint undoes it)."""
    parents = list(Run.objects.using(using).filter(
        pk__in=run_ids, **{f"job__{kind}__isnull": False}).values_list(
        "pk", "job_id", "state", "result", "error", "job__name", "job__owner_id",
        "job__queue", "job__priority", "job__timeout_s", "job__max_attempts",
        "job__retry", f"job__{kind}", "trace_context"))
    if not parents:
        return []
    # The callback continues its parent run's trace: the span of the ack that ended it,
    # when a traced worker's ack did, else the parent's own context (docs/tracing.md).
    acks = tracing.releasing_now() or {}
    trace_of = {p[0]: acks.get(p[0], p[-1]) for p in parents}
    parents = [p[:-1] for p in parents]
    made = set(Job.objects.using(using).filter(
        callback_of__in=[p[0] for p in parents], callback_on=kind).values_list(
        "callback_of", flat=True))
    jobs = [_job(parent, kind, now) for parent in parents if parent[0] not in made]
    if not jobs:
        return []
    Job.objects.using(using).bulk_create(jobs)
    shards = conf.get("SHARDS")
    runs = Run.objects.using(using).bulk_create([
        Run(job_id=job.pk, scheduled_at=now, run_at=now, queue=job.queue,
            shard=shard_of(job.shard_source, shards), priority=job.priority,
            max_attempts=job.max_attempts, trace_context=trace_of[job.callback_of])
        for job in jobs])
    get_broker(using).push_after_commit([
        RunRef(run.pk, run.queue, run.shard, run.priority, run.run_at, job.owner_id)
        for run, job in zip(runs, jobs, strict=True)])
    return [run.pk for run in runs]


def _job(parent: tuple, kind: str, now: datetime) -> Job:
    """The unsaved callback job of ``parent`` (a row of make_callbacks' query)."""
    (run_id, job_id, state, result, error, name, owner_id, queue, priority, timeout_s,
     max_attempts, retry, callback) = parent
    what = {"run": run_id, "job": job_id, "state": state}
    what.update({"result": result} if kind == SUCCESS else {"error": error})
    return Job(name=f"{kind} of run {run_id}: {name}"[:200], owner_id=owner_id,
               handler=callback["handler"],
               payload={**callback.get("payload", {}), "callback": what}, queue=queue,
               priority=priority, run_at=now, timeout_s=timeout_s,
               max_attempts=max_attempts, retry=retry, callback_of=run_id,
               callback_on=kind)


LISTENER = CallbackListener()
