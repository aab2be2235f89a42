"""WSGI entry point for gunicorn: ``gunicorn scheduler_project.wsgi``. ``runserver`` loads
it too. With DEBUG off it refuses to serve on the development SECRET_KEY or with no
ALLOWED_HOSTS (scheduler_core/startup.py, docs/security.md)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_project.settings")
application = get_wsgi_application()

from scheduler_core.startup import refuse_insecure_start  # noqa: E402 (needs settings)

refuse_insecure_start("the web server", web=True)
