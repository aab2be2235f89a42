from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Runs and attempts"

    def ready(self) -> None:
        # The scheduler's system checks (scheduler_core/checks.py; docs/security.md,
        # "System checks") register as their modules load.
        # The rate limit models are defined apart from runs/models.py (runs/flow/models.py).
        from runs import checks  # noqa: F401
        from scheduler_core import checks as core_checks  # noqa: F401
