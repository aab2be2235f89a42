"""Checking the specs of a create before anything is stored: each spec by
jobs/validation.py's ``validate_job`` and, for an owner, by its bounds (jobs/tenants.py);
``validate_specs`` names every bad item. jobs/services.py's creates, the REST API's bulk
create and the workflows' node checks call it."""

from jobs import tenants
from jobs.validation import job_limits, validate_job
from scheduler_core.exceptions import InvalidJob


class InvalidJobs(InvalidJob):
    """Some jobs of a bulk request are invalid; ``errors`` maps each bad item's index to
    its field errors. Nothing was stored."""

    def __init__(self, errors: dict[int, dict[str, str]]):
        self.item_errors = errors
        flat = {f"[{i}].{field}": reason for i, errs in errors.items()
                for field, reason in errs.items()}
        super().__init__(flat)


def validate_specs(specs: list[dict], bounds: tenants.Bounds | None = None) -> list[dict]:
    """Every spec checked by ``validate_job`` and, given an owner's ``bounds``, by
    tenants.field_problems; returns the cleaned specs, a priority, timeout_s or
    max_attempts left out (None) filled with its default within the bounds
    (tenants.defaults_within). Raises InvalidJobs with every bad item's index and fields."""
    limits, cleaned, errors = job_limits(), [], {}
    owner_id = bounds.owner_id if bounds is not None else None  # what secrets are sealed for
    # Defaults are filled in first, so the bounds check them as if the client sent them.
    defaults = tenants.defaults_within(bounds)
    for i, spec in enumerate(specs):
        spec = tenants.with_defaults(spec, defaults)
        try:
            cleaned.append(validate_job(spec, limits, owner_id=owner_id))
        except InvalidJob as exc:
            errors[i] = exc.errors
        if bounds is not None and (problems := tenants.field_problems(spec, bounds)):
            errors[i] = {**problems, **errors.get(i, {})}
    if errors:
        raise InvalidJobs(errors)
    return cleaned
