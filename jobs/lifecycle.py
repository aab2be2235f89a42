"""A job's status as the API and the admin show it (docs/api.md, "Job status").

The stored ``Job.status`` says what an operator decided: active, paused or cancelled. A
one-off job that is active but has no run left to run (each of its runs succeeded, died
or was cancelled) will never run again by itself, so it is shown ``finished``, like
Oban's completed jobs, instead of ``active``. ``finished`` is derived from the runs, not
stored: a run of the job that goes back to the queue (a dead run requeued, a trigger)
makes the job active again without anyone writing to it. Filters and the admin's list
filter take ``finished`` like the stored values. A workflow's node job is never
``finished``: its workflow makes its runs, the next at the workflow's next run (before the
first one it has none), so it reads as its stored status (jobs/node_job_lists.py).
"""

from django.db.models import Case, CharField, Exists, F, OuterRef, Q, QuerySet, Value, When

from jobs import node_job_lists
from jobs.models import Job
from runs.models import TERMINAL_STATES, Run

FINISHED = "finished"
SHOWN_STATUSES = [*Job.Status.choices, (FINISHED, "Finished")]


def _unfinished_runs():
    return Run.objects.filter(job=OuterRef("pk")).exclude(state__in=TERMINAL_STATES)


def with_shown_status(jobs: QuerySet) -> QuerySet:
    """``jobs`` (a Job queryset) annotated with ``shown_status``: the stored status, or
    ``finished`` for an active one-off job none of whose runs is left to run. One EXISTS
    per one-off job row, on the runs' (job, scheduled_at) unique index."""
    return jobs.annotate(shown_status=Case(
        When(Q(schedule__isnull=True, status=Job.Status.ACTIVE) & ~node_job_lists.node_q()
             & ~Exists(_unfinished_runs()), then=Value(FINISHED)),
        default=F("status"), output_field=CharField()))


def shown_status(job: Job) -> str:
    """The status ``job`` is shown with: its ``shown_status`` annotation when the job came
    from ``with_shown_status``, else worked out with one query (a one-off active job)."""
    annotated = getattr(job, "shown_status", None)
    if annotated is not None:
        return annotated
    if job.schedule_id is not None or job.status != Job.Status.ACTIVE:
        return job.status
    unfinished = Run.objects.filter(job_id=job.pk).exclude(state__in=TERMINAL_STATES)
    if unfinished.exists() or node_job_lists.workflow_of(job) is not None:
        return job.status
    return FINISHED
