from django.apps import AppConfig


class SchedulerTasksConfig(AppConfig):
    name = "scheduler_tasks"
    verbose_name = "Django tasks on the scheduler"

    def ready(self) -> None:
        from jobs.scheduler import scheduler_starting
        from scheduler_tasks.periodic import sync_on_start

        # The scheduler sends this once as it starts: the periodic tasks' cron jobs are
        # brought in line with the code being deployed (docs/django-tasks.md, "Periodic").
        scheduler_starting.connect(sync_on_start, dispatch_uid="scheduler_tasks.periodic")
