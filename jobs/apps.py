from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Jobs and schedules"

    def ready(self) -> None:
        from jobs.registry import autodiscover

        autodiscover()
