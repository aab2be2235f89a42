from django.apps import AppConfig


class ChaosConfig(AppConfig):
    """The fault-injection harness (``manage.py chaos``) and its handlers (chaos.work,
    busy_loop, suicide). Installed only by scheduler_project/settings_chaos.py and the
    test settings, never by the production settings."""

    name = "chaos"
    verbose_name = "fault injection"
