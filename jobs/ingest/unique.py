"""Unique jobs: a job created with a ``unique_key`` is not created again while an earlier
job of the same owner with that key still counts; the create answers the earlier job,
flagged as a conflict, as Oban's unique jobs do (docs/api.md, "Unique jobs").

The database enforces it: ``Job.unique_lock`` ("<owner id or ->:<key>") has a unique
constraint and is set while the job holds its key. A job stops holding its key when its
period (``unique_period_s`` after its creation) has passed, when it is cancelled, or, for a
one-off job, once its run has left the counted states (``unique_states``; default the
unfinished ones, Oban's "incomplete" group, procrastinate's queueing lock held until the
job ends). A recurring job holds it while it is not cancelled. The lock is given up lazily:
a create with the key first releases it from the jobs that no longer hold it (their rows
locked), then inserts; two creates racing past that both insert, and the unique
constraint makes the second fail and retry, when it finds the first's job.
"""

from datetime import datetime, timedelta

from jobs.models import Job
from runs.models import PENDING_STATES, Run, RunState
from scheduler_core.text import line_problem

KEY_MAX = 200
PERIOD_MAX = 2_147_483_647  # seconds; the REST field's bound (PostgreSQL integer)
DEFAULT_STATES = tuple(PENDING_STATES) + (RunState.RUNNING,)
ALL_STATES = tuple(RunState.values)


def lock_of(owner_id: int | None, key: str) -> str:
    """The ``unique_lock`` value of ``key`` for owner ``owner_id`` (None: no owner)."""
    return f"{'-' if owner_id is None else owner_id}:{key}"


def _utf8(text: str) -> bool:
    if text.isascii():  # the common case, without building the bytes
        return True
    try:
        text.encode()
    except UnicodeEncodeError:  # a lone surrogate, which PostgreSQL cannot store
        return False
    return True


def problems(spec: dict) -> dict[str, str]:
    """Field errors of a spec's ``unique_key`` (text, at most KEY_MAX characters),
    ``unique_period_s`` (whole seconds, 1 to PERIOD_MAX, or None: no end) and ``unique_states``
    (run states, at least one; None: DEFAULT_STATES); the last two need a key."""
    errors = {}
    key = spec.get("unique_key")
    if key is not None and (not isinstance(key, str) or not 1 <= len(key) <= KEY_MAX
                            or "\x00" in key or not _utf8(key)):
        errors["unique_key"] = f"must be text of 1 to {KEY_MAX} characters"
    elif key is not None and (problem := line_problem(key)):
        errors["unique_key"] = problem
    period = spec.get("unique_period_s")
    if period is not None and (isinstance(period, bool) or not isinstance(period, int)
                               or not 1 <= period <= PERIOD_MAX):
        errors["unique_period_s"] = f"must be a whole number of seconds, 1 to {PERIOD_MAX}"
    states = spec.get("unique_states")
    if states is not None and (not isinstance(states, list | tuple) or not states
                               or any(s not in ALL_STATES for s in states)):
        errors["unique_states"] = f"must be a list of run states from {', '.join(ALL_STATES)}"
    if key is None:
        for field in ("unique_period_s", "unique_states"):
            if spec.get(field) is not None:
                errors.setdefault(field, "needs a unique_key")
    return errors


def columns(spec: dict, owner_id: int | None, now: datetime
            ) -> tuple[str, str | None, str, datetime | None]:
    """The unique fields of a new job of the cleaned ``spec`` created at ``now`` by owner
    ``owner_id``: (unique_key, unique_lock, unique_states, unique_until); a spec without a
    key gets the columns' defaults ("", None, "", None)."""
    key = spec.get("unique_key")
    if not key:
        return "", None, "", None
    # A set, in ALL_STATES order: a list repeating a state fits the column all the same.
    chosen = set(spec.get("unique_states") or DEFAULT_STATES)
    period = spec.get("unique_period_s")
    return (key, lock_of(owner_id, key), ",".join(s for s in ALL_STATES if s in chosen),
            now + timedelta(seconds=period) if period else None)


def _holds(job: Job, now: datetime, using: str) -> bool:
    if job.status == Job.Status.CANCELLED:
        return False
    if job.unique_until is not None and job.unique_until <= now:
        return False
    if job.schedule_id is not None:
        return True
    states = job.unique_states.split(",") if job.unique_states else DEFAULT_STATES
    return Run.objects.using(using).filter(job=job, state__in=states).exists()


def conflicts(specs: list[dict], owner_id: int | None, now: datetime,
              using: str) -> dict[int, Job | int]:
    """For the cleaned ``specs`` about to be created (inside the create's transaction):
    index -> the existing job holding that spec's key, or the index of an earlier spec of
    the same batch with the same key. Releases the key of the jobs that no longer hold
    it first (their rows locked)."""
    locks = {i: lock_of(owner_id, s["unique_key"]) for i, s in enumerate(specs)
             if s.get("unique_key")}
    if not locks:
        return {}
    rows = list(Job.objects.using(using).filter(unique_lock__in=set(locks.values()))
                .select_for_update(of=("self",)).select_related("schedule", "owner"))
    stale = [job.pk for job in rows if not _holds(job, now, using)]
    if stale:
        Job.objects.using(using).filter(pk__in=stale).update(unique_lock=None)
    held = {job.unique_lock: job for job in rows if job.pk not in stale}
    found: dict[int, Job | int] = {}
    first: dict[str, int] = {}
    for i, lock in locks.items():
        if lock in held:
            found[i] = held[lock]
        elif lock in first:
            found[i] = first[lock]
        else:
            first[lock] = i
    return found
