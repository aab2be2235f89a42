"""Safe defaults of the settings (docs/security.md): DEBUG off unless turned on, no
wildcard ALLOWED_HOSTS, the HTTPS knobs from the environment, servers and daemons that
refuse the development SECRET_KEY, and error pages that show no environment."""

import os
import runpy
import secrets
import subprocess
import sys

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.test import Client, override_settings

from runs.daemons.daemon import Daemon
from scheduler_core.startup import DEV_SECRET_KEY, InsecureStart
from tests.conftest import ROOT

# Every variable settings.py reads for these defaults; each test starts with none set.
DEPLOY_VARS = ["DEBUG", "SECRET_KEY", "ALLOWED_HOSTS", "SESSION_COOKIE_SECURE",
               "CSRF_COOKIE_SECURE", "SECURE_SSL_REDIRECT", "SECURE_HSTS_SECONDS",
               "SECURE_HSTS_INCLUDE_SUBDOMAINS", "SECURE_HSTS_PRELOAD",
               "CSRF_TRUSTED_ORIGINS", "SECURE_PROXY_SSL_HEADER"]


def settings_under(monkeypatch, **env) -> dict:
    """scheduler_project/settings.py evaluated afresh under the environment ``env`` (the
    deployment variables not given are unset): its module globals."""
    for name in DEPLOY_VARS:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(ROOT / "scheduler_project" / "settings.py"))


def test_debug_is_off_unless_turned_on(monkeypatch):
    assert settings_under(monkeypatch)["DEBUG"] is False
    assert settings_under(monkeypatch, DEBUG="false")["DEBUG"] is False
    assert settings_under(monkeypatch, DEBUG="true")["DEBUG"] is True


def test_a_misspelt_switch_is_an_error_not_false(monkeypatch):
    with pytest.raises(ImproperlyConfigured, match="SESSION_COOKIE_SECURE='flase'"):
        settings_under(monkeypatch, SESSION_COOKIE_SECURE="flase")
    with pytest.raises(ImproperlyConfigured, match="SECURE_PROXY_SSL_HEADER"):
        settings_under(monkeypatch, SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto: https")


def test_allowed_hosts_has_no_wildcard_default(monkeypatch):
    production = settings_under(monkeypatch)
    development = settings_under(monkeypatch, DEBUG="true")
    given = settings_under(monkeypatch, ALLOWED_HOSTS="a.example, b.example,")

    assert production["ALLOWED_HOSTS"] == []
    assert development["ALLOWED_HOSTS"] == [".localhost", "127.0.0.1", "[::1]"]
    assert given["ALLOWED_HOSTS"] == ["a.example", "b.example"]


def test_https_knobs_come_from_the_environment(monkeypatch):
    production = settings_under(monkeypatch)
    development = settings_under(monkeypatch, DEBUG="true")
    heroku = settings_under(
        monkeypatch, SECURE_SSL_REDIRECT="true", SECURE_HSTS_SECONDS="31536000",
        SECURE_HSTS_INCLUDE_SUBDOMAINS="true", SECURE_HSTS_PRELOAD="true",
        CSRF_TRUSTED_ORIGINS="https://sched.example.com", SESSION_COOKIE_SECURE="false",
        SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto")

    assert production["SESSION_COOKIE_SECURE"] and production["CSRF_COOKIE_SECURE"]
    assert not production["SECURE_SSL_REDIRECT"] and production["SECURE_HSTS_SECONDS"] == 0
    assert production["SECURE_PROXY_SSL_HEADER"] is None
    assert not development["SESSION_COOKIE_SECURE"]
    assert not development["CSRF_COOKIE_SECURE"]
    assert heroku["SECURE_SSL_REDIRECT"] and heroku["SECURE_HSTS_SECONDS"] == 31536000
    assert heroku["SECURE_HSTS_INCLUDE_SUBDOMAINS"] and heroku["SECURE_HSTS_PRELOAD"]
    assert heroku["CSRF_TRUSTED_ORIGINS"] == ["https://sched.example.com"]
    assert heroku["SESSION_COOKIE_SECURE"] is False and heroku["CSRF_COOKIE_SECURE"]
    assert heroku["SECURE_PROXY_SSL_HEADER"] == ("HTTP_X_FORWARDED_PROTO", "https")


def test_an_oversized_login_post_shows_no_environment(monkeypatch):
    """The technical error page (DEBUG) listed the environment and settings, REDIS_URL
    and DATABASE_URL with their passwords, to anyone sending a big form with a CSRF
    cookie."""
    production = settings_under(monkeypatch)
    client = Client(enforce_csrf_checks=True)
    client.cookies["csrftoken"] = "x" * 32
    body = "a=" + "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)

    with override_settings(DEBUG=production["DEBUG"]):
        response = client.post("/admin/login/", body,
                               content_type="application/x-www-form-urlencoded")

    page = response.content.decode()
    assert response.status_code == 400
    for secret in ("REDIS_URL", settings.REDIS_URL, "DATABASE", "SECRET_KEY", "Traceback"):
        assert secret not in page


@pytest.mark.django_db
def test_a_forged_host_is_not_reflected_into_links(monkeypatch, api, alice):
    production = settings_under(monkeypatch)

    with override_settings(ALLOWED_HOSTS=[*production["ALLOWED_HOSTS"], "testserver"]):
        forged = api.get("/api/jobs/", {"page_size": 1}, headers={"host": "evil.example"})
        honest = api.get("/api/jobs/", {"page_size": 1})

    assert forged.status_code == 400
    assert b"evil.example" not in forged.content
    assert forged.json() == {"detail": "Bad request."}
    assert honest.status_code == 200


class WouldServe(Exception):
    """Raised in place of a daemon's readiness check: the daemon was about to serve."""


@pytest.fixture
def no_serving(monkeypatch):
    def would_serve(self):
        raise WouldServe(self.name)

    monkeypatch.setattr(Daemon, "check_ready", would_serve)


@pytest.mark.parametrize("argv", [["runscheduler", "--max-ticks", "1"],
                                  ["rundispatcher", "--max-rounds", "1"],
                                  ["runworker", "--burst"]])
@pytest.mark.parametrize("key", [DEV_SECRET_KEY, ""])
def test_daemons_refuse_the_development_key_with_debug_off(no_serving, argv, key):
    with override_settings(DEBUG=False, SECRET_KEY=key), pytest.raises(InsecureStart) as refused:
        call_command(*argv)

    assert "SECRET_KEY" in str(refused.value)
    assert "secrets.token_urlsafe(50)" in str(refused.value)


def test_daemons_start_on_a_key_of_their_own_or_with_debug_on(no_serving):
    with override_settings(DEBUG=False, SECRET_KEY=secrets.token_urlsafe(50)), \
            pytest.raises(WouldServe):
        call_command("runscheduler", "--max-ticks", "1")
    with override_settings(DEBUG=True, SECRET_KEY=DEV_SECRET_KEY), pytest.raises(WouldServe):
        call_command("runscheduler", "--max-ticks", "1")


def test_runall_refuses_before_starting_any_process(monkeypatch):
    from jobs.management.commands import runall

    def would_start(self):
        raise WouldServe("runall")

    monkeypatch.setattr(runall.Supervisor, "loop", would_start)
    with override_settings(DEBUG=False, SECRET_KEY=DEV_SECRET_KEY, ALLOWED_HOSTS=[]):
        with pytest.raises(InsecureStart) as refused:
            call_command("runall", "--web")

    assert "SECRET_KEY" in str(refused.value) and "ALLOWED_HOSTS" in str(refused.value)


def test_the_web_server_also_needs_allowed_hosts():
    from scheduler_core.startup import problems

    with override_settings(DEBUG=False, SECRET_KEY=secrets.token_urlsafe(50),
                           ALLOWED_HOSTS=[]):
        assert [m.id for m in problems(web=True)] == ["scheduler.E002"]
        assert problems(web=False) == []
    with override_settings(DEBUG=False, SECRET_KEY=secrets.token_urlsafe(50),
                           ALLOWED_HOSTS=["sched.example.com"]):
        assert problems(web=True) == []


@pytest.mark.slow
@pytest.mark.parametrize("server", [
    ["-m", "gunicorn", "scheduler_project.wsgi", "--bind", "127.0.0.1:0", "--workers", "1"],
    [str(ROOT / "manage.py"), "runserver", "--noreload", "--skip-checks", "127.0.0.1:0"],
], ids=["gunicorn", "runserver"])
def test_the_web_server_refuses_to_start_on_the_development_key(tmp_path, server):
    env = {k: v for k, v in os.environ.items() if k not in DEPLOY_VARS}
    env.update(DJANGO_SETTINGS_MODULE="scheduler_project.settings",
               DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}", ALLOWED_HOSTS="127.0.0.1")
    started = subprocess.run([sys.executable, *server], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=60)

    assert started.returncode != 0
    assert "the web server refuses to start" in started.stderr
    assert "export SECRET_KEY=" in started.stderr


def documented_production_env() -> dict:
    """The environment docs/security.md gives for a Heroku-style host (its first ```sh
    block after "The production environment"), with a random value for each ``...``."""
    text = (ROOT / "docs" / "security.md").read_text()
    block = text[text.index("**The production environment**"):]
    block = block[block.index("```sh\n") + 6:]
    block = block[:block.index("```")]
    env = {}
    for line in block.splitlines():
        name, _, value = line.split("#")[0].strip().partition("=")
        env[name] = secrets.token_urlsafe(50) if value == "..." else value
    return env


@pytest.mark.slow
def test_check_deploy_finds_nothing_in_the_documented_production_environment(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in DEPLOY_VARS}
    env.update(DJANGO_SETTINGS_MODULE="scheduler_project.settings",
               DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
               **documented_production_env())
    check = subprocess.run([sys.executable, str(ROOT / "manage.py"), "check", "--deploy"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)

    assert "SECURE_SSL_REDIRECT" in env and "SECRET_KEY" in env
    assert check.returncode == 0, check.stderr
    assert "System check identified no issues (0 silenced)." in check.stdout, check.stderr


@pytest.mark.parametrize("apps, found", [("", False), ("chaos", True)])
def test_extra_apps_adds_a_users_apps_whose_handlers_every_process_loads(tmp_path, apps,
                                                                            found):
    """EXTRA_APPS (docs/deploy.md, "Environment"): the apps of one's own handlers, installed
    in every process of this project without editing settings.py; here the fault-injection
    app, whose handlers.py registers busy_loop."""
    env = {k: v for k, v in os.environ.items() if k not in DEPLOY_VARS}
    env.update(DJANGO_SETTINGS_MODULE="scheduler_project.settings", DEBUG="true",
               DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}", EXTRA_APPS=apps)
    probe = ("from scheduler_core.registry import handler_names; "
             "print('busy_loop' in handler_names())")
    shell = subprocess.run([sys.executable, str(ROOT / "manage.py"), "shell", "-c", probe],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)

    assert shell.returncode == 0, shell.stderr
    assert shell.stdout.strip().splitlines()[-1] == str(found)
