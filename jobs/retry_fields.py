"""The job fields of a run's fate after the handler and before the worker: ``retry`` (the
retry strategy, runs/execution/retry.py) and ``expires_at`` / ``expires_in_s`` (expiry,
runs/execution/expiry.py), checked for every way in by jobs/validation.py (docs/api.md, "Job
fields"; docs/retries-and-expiry.md)."""

from datetime import datetime, timedelta

from django.utils import timezone

from runs.execution import retry
from runs.tenancy.quotas import MAX_INT


def _due(spec: dict) -> datetime:
    """When the one-off run of ``spec`` falls due: its run_at, now if that is past (a
    past run_at means now), else now plus delay_s (this process's clock: a bound for a
    check, not a time to store)."""
    run_at, now = spec.get("run_at"), timezone.now()
    if isinstance(run_at, datetime) and run_at.utcoffset() is not None:
        return max(run_at, now)
    delay = spec.get("delay_s")
    delay = delay if type(delay) in (int, float) and delay >= 0 else 0
    return now + timedelta(seconds=min(delay, MAX_INT))


def problems(spec: dict, clean: dict, moment_problem) -> dict[str, str]:
    """{field: reason} for each bad one of ``spec``'s retry, expires_at and expires_in_s;
    their cleaned values go into ``clean``. ``moment_problem`` is jobs/validation.py's
    check of a datetime's range."""
    errors: dict[str, str] = {}
    try:
        clean["retry"] = retry.clean(spec.get("retry"))
    except ValueError as exc:
        errors["retry"] = str(exc)
    at, in_s = spec.get("expires_at"), spec.get("expires_in_s")
    if at is not None and in_s is not None:
        both = "give at most one of expires_at or expires_in_s"
        return {**errors, "expires_at": both, "expires_in_s": both}
    if at is not None:
        if not isinstance(at, datetime):
            errors["expires_at"] = "must be a datetime"
        elif at.utcoffset() is None:
            errors["expires_at"] = "must carry a UTC offset (naive datetimes are ambiguous)"
        elif problem := moment_problem(at):
            errors["expires_at"] = problem
        elif spec.get("cron"):
            errors["expires_at"] = ("applies to one-off jobs only; a cron job's runs take "
                                    "expires_in_s, counted from each occurrence")
        elif at <= (due := _due(spec)):
            errors["expires_at"] = (f"must be after the run's time ({due.isoformat()}: "
                                    "run_at, or now plus delay_s): the run could never start")
    if in_s is not None and (type(in_s) is not int or not 1 <= in_s <= MAX_INT):
        errors["expires_in_s"] = f"must be an integer from 1 to {MAX_INT} (seconds)"
    return errors


def move_problems(expires_at: datetime | None, run_at) -> dict[str, str]:
    """``{"run_at": reason}`` when a one-off job's ``run_at`` (an aware datetime, its new
    time) is at or past its ``expires_at``: its run could never start; else ``{}``."""
    if expires_at is None or not isinstance(run_at, datetime) or run_at.utcoffset() is None \
            or run_at < expires_at:
        return {}
    return {"run_at": f"must be before the job's expires_at ({expires_at.isoformat()}): "
                      "the run could never start"}
