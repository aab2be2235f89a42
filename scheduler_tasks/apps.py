from django.apps import AppConfig


class SchedulerTasksConfig(AppConfig):
    name = "scheduler_tasks"
    verbose_name = "Django tasks on the scheduler"

    def ready(self) -> None:
        from jobs.schedules.scheduler import scheduler_starting
        from scheduler_tasks.periodic import sync_on_start

        # The scheduler sends this once as it starts: the periodic tasks' cron jobs are
        # brought in line with the code being deployed (docs/django-tasks.md, "Periodic").
        scheduler_starting.connect(sync_on_start, dispatch_uid="scheduler_tasks.periodic")

        from django.tasks import signals

        from scheduler_tasks.attempt_log import log_task_finished

        # A retried attempt is a WARNING line, not Django's ERROR with a traceback
        # (scheduler_tasks/attempt_log.py).
        signals.task_finished.disconnect(signals.log_task_finished)
        signals.task_finished.connect(log_task_finished,
                                      dispatch_uid="scheduler_tasks.attempt_log")
