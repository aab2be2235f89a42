"""Reading an http job's sealed secret headers back in tests, as the worker opens them
(for the job's owner, its seal and the header's name)."""

from jobs.models import Job
from runs.outbound.payload import opened


def secret_of(job, name: str) -> str:
    """The value of ``job``'s (a Job or its id) secret header ``name``, as stored now."""
    stored = Job.objects.get(pk=getattr(job, "pk", job))
    return opened(stored.payload, stored.owner_id)[name]
