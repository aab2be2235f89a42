"""Settings for fault injection: the production settings plus the fault-injection app
``chaos`` (``manage.py chaos`` and the handlers chaos.work, busy_loop, suicide) and the
demo handlers. Everything else, the database and Redis included, still comes from the
environment as in scheduler_project/settings.py.

    DJANGO_SETTINGS_MODULE=scheduler_project.settings_chaos python manage.py chaos kill-worker

The daemons a scenario starts get these settings too (chaos/cluster.py), and so do the
daemons the test suite starts (tests/conftest.py). Never deploy with them: the fault
handlers let any API user occupy or kill a worker's child (docs/reliability.md).
"""

from scheduler_project.settings import *  # noqa: F403
from scheduler_project.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "chaos"]
# The test suite's tasks (tests/djtasks_tasks.py) run in the daemons it starts.
SCHEDULER = {"DEMO_HANDLERS": True, "TASK_PACKAGES": "tests"}
