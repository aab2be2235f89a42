"""docs/django-tasks.md, "Example": a project of its own that adds only the
apps that page names to INSTALLED_APPS, and no setting of this checkout's (no
REDIS_URL, no SCHEDULER), migrates and enqueues a task. Run outside the checkout, so
only what an install ships is importable."""

import subprocess
import sys
import textwrap

import pytest

SETTINGS = """
SECRET_KEY = "a test key of this project's own, not the development one"
INSTALLED_APPS = ["django.contrib.auth", "django.contrib.contenttypes",
                  "knox", "jobs", "runs", "scheduler_tasks", "myapp"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "db.sqlite3"}}
TASKS = {"default": {"BACKEND": "scheduler_tasks.backend.SchedulerBackend",
                     "QUEUES": ["default", "mail"], "OPTIONS": {"MAX_ATTEMPTS": 3}}}
USE_TZ = True
"""

TASKS = """
from django.tasks import task


@task(queue_name="mail", max_attempts=5, timeout_s=30)
def send_welcome(user_id: int) -> str:
    return str(user_id)
"""

SCRIPT = """
import django
django.setup()
from django.core.management import call_command
from runs.models import Run
from scheduler_core import conf
from myapp.tasks import send_welcome

call_command("migrate", verbosity=0)
result = send_welcome.enqueue(7)
run = Run.objects.get(pk=result.id)
print(conf.broker_name(), result.status, run.queue, run.job.max_attempts)
"""


@pytest.mark.slow
def test_a_project_with_the_readmes_apps_and_no_redis_url_enqueues_a_task(tmp_path):
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "tasks.py").write_text(textwrap.dedent(TASKS))
    (tmp_path / "settings.py").write_text(textwrap.dedent(SETTINGS))
    env = {"DJANGO_SETTINGS_MODULE": "settings", "PYTHONPATH": str(tmp_path),
           "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["database", "READY", "mail", "5"]
