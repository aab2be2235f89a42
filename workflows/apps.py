from django.apps import AppConfig


class WorkflowsConfig(AppConfig):
    name = "workflows"
    verbose_name = "Workflows"

    def ready(self) -> None:
        from workflows.wiring import connect

        # runs/ and jobs/ never import workflows: the engine's hooks go into their
        # registries here (docs/workflows.md, "Where the engine hooks in").
        connect()
