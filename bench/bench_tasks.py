"""The django.tasks task the W2 variants drain (bench/djtasks.py and the django-tasks-db
peer): a module-level no-op, importable by the workers as ``bench_tasks.noop`` with bench/
on their path."""

from django.tasks import task


@task
def noop(i: int) -> None:
    return None
