from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Jobs and schedules"

    def ready(self) -> None:
        from scheduler_core.registry import autodiscover

        autodiscover()
