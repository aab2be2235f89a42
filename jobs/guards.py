"""Jobs that an app above jobs/ manages, and the writes refused on them: a workflow's node
is backed by a job whose runs only the workflow's runs make (docs/workflows.md, "Node
jobs"), so pausing, resuming, cancelling, triggering or editing that job through the
jobs' Python API (and so the REST API and the admin, which call it) would break the
workflow's accounting. jobs/ never imports workflows/: the workflows app registers a
``describe`` here when Django starts (workflows/wiring.py). Reads are never guarded.
"""

from collections.abc import Callable

from scheduler_core.exceptions import SchedulerError

# describe(job ids, database alias) -> {job id: what manages it, e.g. "node 'load' of
# workflow 3 ('etl')"} for the managed jobs among the ids (one query).
_managers: list[Callable[[list[int], str], dict[int, str]]] = []


class ManagedJob(SchedulerError):
    """A write through the jobs' API to a job another app manages (a workflow's node);
    nothing was changed. ``job_id`` is the first such job, ``manager`` what manages it.
    The REST API answers 409 with the message (jobs/api/jobs.py)."""

    def __init__(self, job_id: int, manager: str, verb: str):
        self.job_id, self.manager = job_id, manager
        super().__init__(
            f"job {job_id} is {manager}: its runs are made by the workflow's runs, so it "
            f"cannot be {verb} through the jobs API; pause, resume, cancel or trigger the "
            f"workflow or its workflow runs instead (docs/workflows.md, \"Node jobs\")")


def manage(describe: Callable[[list[int], str], dict[int, str]]) -> None:
    """Register ``describe`` (once): given job ids and a database alias, it returns
    ``{job id: what manages it}`` for those of the ids it manages."""
    if describe not in _managers:
        _managers.append(describe)


def managed(job_ids, using: str = "default") -> dict[int, str]:
    """``{job id: what manages it}`` for the managed jobs among ``job_ids`` (ids); no
    query when nothing is registered."""
    ids = [int(pk) for pk in job_ids]
    found: dict[int, str] = {}
    if not _managers or not ids:
        return found
    for describe in _managers:
        found.update(describe(ids, using))
    return found


def refuse_managed(job_ids, verb: str, using: str = "default") -> None:
    """Raise ManagedJob, naming the lowest managed id, when any of ``job_ids`` is managed
    (``verb``: what the caller would do, e.g. "paused"); a call over many jobs is refused
    whole, so nothing is half done."""
    found = managed(job_ids, using)
    if found:
        job_id = min(found)
        raise ManagedJob(job_id, found[job_id], verb)
