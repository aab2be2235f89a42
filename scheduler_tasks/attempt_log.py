"""The console line of a django.tasks attempt that ends (docs/django-tasks.md, "In the
worker"): Django's own receiver of ``task_finished`` logs every FAILED result at ERROR with
its traceback, and this backend sends ``task_finished`` after each attempt, so an
attempt the scheduler retries (and which may then succeed) read as a crash. This receiver
replaces it: an attempt that will be retried is one WARNING line without the traceback;
the last one, whose run goes to the dead letter, ERROR with it; anything else as Django
logs it, on the same ``django.tasks`` logger.
"""

import logging
import sys
from contextvars import ContextVar

from django.tasks import TaskResultStatus

logger = logging.getLogger("django.tasks")

# Set by the django_task handler while it sends task_finished for a failed attempt that
# the scheduler will retry (scheduler_tasks/handlers.py).
retrying: ContextVar[bool] = ContextVar("retrying", default=False)


def log_task_finished(sender, task_result, **kwargs) -> None:
    """Receiver of task_finished in Django's place (connected by SchedulerTasksConfig)."""
    failed = task_result.status == TaskResultStatus.FAILED
    if failed and retrying.get():
        error = task_result.errors[-1].exception_class_path if task_result.errors else "?"
        logger.warning("Task id=%s path=%s attempt failed (%s); the scheduler retries it",
                       task_result.id, task_result.task.module_path, error)
        return
    exc_info = sys.exc_info()  # sent inside the exception handler, as Django's is
    logger.log(logging.ERROR if failed else logging.INFO, "Task id=%s path=%s state=%s",
               task_result.id, task_result.task.module_path, task_result.status,
               exc_info=exc_info if exc_info[0] else None)
