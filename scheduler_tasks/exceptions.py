"""The exception classes a TaskError names for attempts that did not end by raising in the
task function itself (docs/django-tasks.md, "Results")."""


class TaskTimedOut(TimeoutError):
    """The attempt ran longer than its ``timeout_s`` and the worker cut it off."""


class WorkerLost(RuntimeError):
    """The process running the attempt died (``crashed``) or its worker stopped
    heartbeating (``lease_expired``); the attempt's error says which."""


class NotATask(TypeError):
    """The path recorded at enqueue does not name a module-level django.tasks Task."""
