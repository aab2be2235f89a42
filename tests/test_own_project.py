"""docs/own-project.md: a project of its own built from the doc's settings.py and urls.py
blocks (as written there, plus what `startproject` gives every project), run outside the
checkout so only what the install ships is found: every admin page of the apps, the
dashboard's static files and the API's entry points answer 200, every API endpoint
answers 401 to a request without credentials, an unknown API path a JSON 404. The
admin's templates lived in the checkout's top-level templates/ folder, which no install
ships (a new user's project got TemplateDoesNotExist on the run, dead-letter and
workflow-run pages), and the API's views took their login requirement and throttles from
the project's REST_FRAMEWORK defaults (DRF's AllowAny let anonymous requests in)."""

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "own-project.md"

# What `django-admin startproject` writes besides INSTALLED_APPS (Django 6.1), trimmed to
# the settings the pages need.
STARTPROJECT = """
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent
SECRET_KEY = "a test key of this project's own, not the development one"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
ROOT_URLCONF = "urls"
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "DIRS": [],
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "db.sqlite3"}}
STATIC_URL = "static/"
USE_TZ = True
"""

HANDLERS = """
from jobs.registry import handler


@handler("myapp.hello")
def hello(ctx, payload):
    return {"hello": payload.get("name")}
"""

SCRIPT = """
import django
django.setup()
from django.core.management import call_command
from django.contrib.auth import get_user_model
from django.test import Client
from django.test.utils import setup_test_environment

from jobs import services
from scheduler_core.rest.tokens import create_token
from runs.models import Run
from workflows import services as workflows

setup_test_environment()
call_command("migrate", verbosity=0)
boss = get_user_model().objects.create_superuser("boss", "boss@example.com", "pw")
token = create_token(boss)
job = services.create_job("myapp.hello", {"name": "ada"}, delay_s=60, owner=boss)
run = Run.objects.filter(job=job).get()
flow = workflows.create_workflow(
    "pair", [{"name": "a", "handler": "myapp.hello", "payload": {}},
             {"name": "b", "handler": "myapp.hello", "payload": {}}], [("a", "b")],
    owner=boss)
flow_run = workflows.start_workflow_run(flow)

admin = Client()
admin.force_login(boss)
api = Client(headers={"Authorization": f"Token {token}"})
call_command("collectstatic", interactive=False, verbosity=0)
anonymous = Client()
for url in ["/api/", "/api/jobs/", f"/api/jobs/{job.pk}/runs/", "/api/runs/",
            f"/api/runs/{run.pk}/", f"/api/runs/{run.pk}/logs/", "/api/dead-letter/",
            "/api/queues/", "/api/limits/", "/api/alerts/", f"/api/jobs/{job.pk}/alerts/",
            "/api/workflows/", f"/api/workflow-runs/{flow_run.pk}/", "/api/schema/",
            "/api/docs/"]:
    print(f"anonymous {url}={anonymous.get(url).status_code}", flush=True)
missing = api.get("/api/no-such-thing/")
print(f"unknown api path={missing.status_code} {missing.headers['Content-Type']}", flush=True)
pages = {
    "dashboard script": (admin, "/static/runs/dashboard.js"),
    "admin index": (admin, "/admin/"),
    "job": (admin, f"/admin/jobs/job/{job.pk}/change/"),
    "runs": (admin, "/admin/runs/run/"),
    "run": (admin, f"/admin/runs/run/{run.pk}/change/"),
    "dead letter": (admin, "/admin/runs/deadrun/"),
    "workflow": (admin, f"/admin/workflows/workflow/{flow.pk}/change/"),
    "workflow run": (admin, f"/admin/workflows/workflowrun/{flow_run.pk}/change/"),
    "dashboard": (admin, "/admin/dashboard/"),
    "api jobs": (api, "/api/jobs/"),
    "api workflow run": (api, f"/api/workflow-runs/{flow_run.pk}/"),
    "api schema": (api, "/api/schema/"),
    "api docs": (api, "/api/docs/"),
}
for name, (client, url) in pages.items():
    print(f"{name}={client.get(url).status_code}", flush=True)
"""


def doc_block(name: str) -> str:
    """The fenced block after ``<!-- own-project: NAME -->`` in docs/own-project.md."""
    match = re.search(rf"<!-- own-project: {re.escape(name)} -->\n```python\n(.*?)```",
                      DOC.read_text(), re.S)
    assert match, f"docs/own-project.md has no block marked {name}"
    return match.group(1)


@pytest.mark.slow
def test_a_project_of_the_docs_settings_and_urls_serves_every_admin_page_and_the_api(
        tmp_path):
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "handlers.py").write_text(textwrap.dedent(HANDLERS))
    (tmp_path / "settings.py").write_text(STARTPROJECT + doc_block("settings.py"))
    (tmp_path / "urls.py").write_text(doc_block("urls.py"))
    env = {"DJANGO_SETTINGS_MODULE": "settings", "PYTHONPATH": str(tmp_path),
           "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    said = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    anonymous = {k: v for k, v in said.items() if k.startswith("anonymous ")}
    # Every endpoint wants a login though the project's REST_FRAMEWORK leaves DRF's
    # AllowAny default in place (scheduler_core/rest/view_defaults.py).
    assert anonymous == {k: "401" for k in anonymous} and len(anonymous) == 15, anonymous
    assert said.pop("unknown api path") == "404 application/json"
    statuses = {k: v for k, v in said.items() if k not in anonymous}
    assert statuses == {name: "200" for name in statuses}, statuses
    assert len(statuses) == 13


def test_runall_web_serves_the_projects_own_wsgi_application(settings):
    from django.core.exceptions import ImproperlyConfigured

    from jobs.management.commands.runall import commands

    settings.WSGI_APPLICATION = "mysite.wsgi.application"
    web = commands(web=True, bind="127.0.0.1:8000", workers=1, concurrency=2,
                   queues="default")["web"]
    assert web[3] == "mysite.wsgi:application"
    settings.WSGI_APPLICATION = "application"
    with pytest.raises(ImproperlyConfigured, match="WSGI_APPLICATION"):
        commands(web=True, bind="127.0.0.1:8000", workers=1, concurrency=2, queues="default")
