"""The scheduler's exceptions, under one root (docs/architecture.md, "Conventions in the code")."""


class SchedulerError(Exception):
    """The job scheduler failed."""

    def __init__(self, message: str | None = None):
        super().__init__(message or self.__doc__)

    def __reduce__(self):
        # Pickled (a process pool, a result backend, Django's parallel test runner), an
        # exception is remade by calling its class with its args: the message, which most
        # of ours do not take (RetryAfter wants seconds, InvalidJob a dict). Remade from
        # its state instead.
        return (_remade, (type(self), self.args, self.__dict__))


def _remade(cls: type, args: tuple, state: dict) -> SchedulerError:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class InvalidJob(SchedulerError, ValueError):
    """A job definition is invalid.

    ``errors`` maps a field name to the reason, e.g. ``{"schedule": "bad minute field"}``.
    The message names each reason once, with the fields that have it: a workflow of 100
    nodes naming one unknown handler said its long hint 100 times.
    """

    def __init__(self, errors: dict[str, str]):
        self.errors = errors
        super().__init__(summary(errors))


def summary(errors: dict[str, str]) -> str:
    """``errors`` ({field: reason}) as one line: "field: reason; ...", fields of the same
    reason together ("a, b: reason"; past three, "a, b, c and 97 more: reason")."""
    fields: dict[str, list[str]] = {}
    for field, reason in errors.items():
        fields.setdefault(reason, []).append(field)
    parts = []
    for reason, named in fields.items():
        shown = ", ".join(named[:3]) + (f" and {len(named) - 3} more" if len(named) > 3 else "")
        parts.append(f"{shown}: {reason}")
    return "; ".join(parts)


class UnknownHandler(InvalidJob):
    """No handler is registered under that name."""

    def __init__(self, name: str):
        super().__init__({"handler": f"no handler is registered as {name!r} (register it with "
                                     "@handler in a handlers.py of an app in INSTALLED_APPS, "
                                     "in this process and on every worker; in this "
                                     "repository's own project an app of yours goes in "
                                     "EXTRA_APPS; the demo's need "
                                     "SCHEDULER_DEMO_HANDLERS=true)"})


class BrokerUnavailable(SchedulerError):
    """The broker (Redis or the database) cannot be reached."""


class StaleLease(SchedulerError):
    """The lease is no longer held: it expired and the run moved on (fencing)."""


class RetryAfter(SchedulerError):
    """The handler asked for its run to be retried after a given delay.

    Raised by a handler (``raise RetryAfter(30, "rate limited")``): the attempt is recorded
    as failed and, if the run has attempts left, its next attempt is due ``delay_s``
    seconds (float, at least 0, at most RETRY_BACKOFF_CAP_S) after the failure instead of
    after the exponential backoff (docs/architecture.md, "Handlers"). The built-in
    ``http`` handler raises it for a Retry-After header (docs/http-handler.md).
    """

    def __init__(self, delay_s: float, message: str | None = None):
        self.delay_s = float(delay_s)
        super().__init__(message or f"{self.__doc__.splitlines()[0]} ({self.delay_s:g} s)")


class PermanentFailure(SchedulerError):
    """The handler failed in a way a retry cannot fix: the run goes to the dead letter at
    once, whatever attempts it has left (docs/architecture.md, "Handlers"). The built-in
    ``http`` handler raises it for a 4xx answer other than 429 (docs/http-handler.md)."""
