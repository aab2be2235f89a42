"""WSGI entry point for gunicorn: ``gunicorn scheduler_project.wsgi``. ``runserver`` loads
it too. It refuses to serve on an error of the scheduler's system checks, deployment
ones included: with DEBUG off a weak SECRET_KEY, no ALLOWED_HOSTS or '*' among them
(scheduler_core/startup.py; docs/security.md, "System checks")."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_project.settings")
application = get_wsgi_application()

from scheduler_core.startup import refuse_insecure_start  # noqa: E402 (needs settings)

refuse_insecure_start("the web server", web=True)
