from django.apps import AppConfig


class ChaosConfig(AppConfig):
    """The fault-injection harness; installed so workers discover ``chaos.work``."""

    name = "chaos"
    verbose_name = "fault injection"
