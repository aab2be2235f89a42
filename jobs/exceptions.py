"""The scheduler's exceptions, under one root (docs/architecture.md, "Conventions in the code")."""


class SchedulerError(Exception):
    """The job scheduler failed."""

    def __init__(self, message: str | None = None):
        super().__init__(message or self.__doc__)


class InvalidJob(SchedulerError, ValueError):
    """A job definition is invalid.

    ``errors`` maps a field name to the reason, e.g. ``{"schedule": "bad minute field"}``.
    """

    def __init__(self, errors: dict[str, str]):
        self.errors = errors
        super().__init__("; ".join(f"{field}: {reason}" for field, reason in errors.items()))


class UnknownHandler(InvalidJob):
    """No handler is registered under that name."""

    def __init__(self, name: str):
        super().__init__({"handler": f"no handler is registered as {name!r}"})


class BrokerUnavailable(SchedulerError):
    """The broker (Redis or the database) cannot be reached."""


class StaleLease(SchedulerError):
    """The lease is no longer held: it expired and the run moved on (fencing)."""
