from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Jobs and schedules"

    def ready(self) -> None:
        from jobs import checks  # noqa: F401 - registers the web server's system checks
        from jobs.callbacks import LISTENER
        from runs.execution import hooks
        from scheduler_core.registry import autodiscover

        autodiscover()
        hooks.register(LISTENER)  # on_success / on_failure (docs/callbacks.md)
