"""Configuration problems are Django system checks with ids (docs/security.md, "System
checks"): ``manage.py check`` and ``check --deploy`` report them, and the web server and
the daemons refuse to start on an error among them. One test per check."""

import secrets

import pytest
from django.core import checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from scheduler_core.startup import TAG, WEB_TAG, InsecureStart, problems
from tests.test_safe_defaults import WouldServe, no_serving  # noqa: F401 - a fixture

GOOD_KEY = secrets.token_urlsafe(50)
DEPLOYED = {"DEBUG": False, "SECRET_KEY": GOOD_KEY, "ALLOWED_HOSTS": ["sched.example.com"]}


def ids(**settings) -> list[str]:
    """The ids of every check message, deployment checks included, under ``settings``."""
    with override_settings(**{**DEPLOYED, **settings}):
        found = checks.run_checks(tags=[TAG, WEB_TAG], include_deployment_checks=True)
        return sorted(m.id for m in found)


def test_a_deployment_as_documented_passes_every_scheduler_check():
    assert ids() == []


@pytest.mark.parametrize("key", [
    "changeme", "CHANGE_ME-" + "x" * 60, "your-secret-key-" + secrets.token_urlsafe(40),
    "django-insecure-" + secrets.token_urlsafe(50), "short-but-random-3f9a", "ab" * 30, ""])
def test_e001_refuses_a_missing_placeholder_or_weak_key_with_debug_off(key):
    assert ids(SECRET_KEY=key) == ["scheduler.E001"]
    assert ids(SECRET_KEY=key, DEBUG=True) == []


def test_e001_names_the_problem_but_never_the_key():
    with override_settings(**{**DEPLOYED, "SECRET_KEY": "changeme-please"}):
        [message] = [m for m in problems(web=False)]
    assert "placeholder" in message.msg and "changeme-please" not in message.msg


def test_e002_and_e003_an_empty_or_wildcard_allowed_hosts():
    """'*' reflected any Host header into the API's pagination links."""
    assert ids(ALLOWED_HOSTS=[]) == ["scheduler.E002"]
    assert ids(ALLOWED_HOSTS=["sched.example.com", "*"]) == ["scheduler.E003"]
    assert ids(ALLOWED_HOSTS=["*"], DEBUG=True) == []


def test_e004_an_unknown_or_unreadable_tunable(monkeypatch):
    assert ids(SCHEDULER={"NO_SUCH_TUNABLE": 1}) == ["scheduler.E004"]
    monkeypatch.setenv("SCHEDULER_SHARDS", "many")
    assert ids() == ["scheduler.E004"]
    monkeypatch.delenv("SCHEDULER_SHARDS")
    # A negative count read as a limit already passed: only runworker refused it.
    monkeypatch.setenv("SCHEDULER_MAX_RUNS_PER_CHILD", "-1")
    assert ids() == ["scheduler.E004"]
    monkeypatch.setenv("SCHEDULER_MAX_RUNS_PER_CHILD", "0")
    assert ids(SCHEDULER={"MAX_MEMORY_PER_CHILD_MB": -5}) == ["scheduler.E004"]


def test_e005_a_bad_isolation_setting():
    assert ids(SCHEDULER={"PRIORITY_CLASSES": "0-4:1"}) == ["scheduler.E005"]


@pytest.mark.parametrize("width", [1, 59, -60])
def test_e011_a_history_partition_under_a_minute(width):
    assert ids(SCHEDULER={"HISTORY_PARTITION_S": width}) == ["scheduler.E011"]
    assert ids(SCHEDULER={"HISTORY_PARTITION_S": 0}) == []
    assert ids(SCHEDULER={"HISTORY_PARTITION_S": 60}) == []


def test_w006_a_sqlite_database_the_daemons_cannot_share(settings, monkeypatch):
    monkeypatch.setitem(settings.DATABASES["sqlite"], "OPTIONS", {})
    assert ids() == ["scheduler.W006"]


def test_e007_a_throttle_rate_that_does_not_parse():
    assert ids(SCHEDULER={"API_ANON_THROTTLE_RATE": "lots"}) == ["scheduler.E007"]


def test_e008_and_w009_the_trusted_proxy_networks():
    assert ids(TRUSTED_PROXY_NETWORKS=["10.0.0.0/8", "not-a-network"]) == ["scheduler.E008"]
    assert ids(TRUSTED_PROXY_COUNT=1, TRUSTED_PROXY_NETWORKS=["0.0.0.0/0"]) == [
        "scheduler.W009"]
    assert ids(TRUSTED_PROXY_COUNT=0, TRUSTED_PROXY_NETWORKS=["0.0.0.0/0"]) == []


@pytest.mark.parametrize("networks", [["0.0.0.0/1", "128.0.0.0/1"], ["0.0.0.0/1"],
                                      ["10.0.0.0/8", "2000::/3"], ["::/0"]])
def test_w009_considers_the_union_of_the_trusted_networks(networks):
    """Two halves of the IPv4 space trusted every address without a warning."""
    assert ids(TRUSTED_PROXY_COUNT=1, TRUSTED_PROXY_NETWORKS=networks) == ["scheduler.W009"]


def test_w009_spares_the_defaults_and_narrow_networks():
    from scheduler_core.rest.client_address import DEFAULT_PROXY_NETWORKS

    assert ids(TRUSTED_PROXY_COUNT=1, TRUSTED_PROXY_NETWORKS=list(DEFAULT_PROXY_NETWORKS)) == []
    assert ids(TRUSTED_PROXY_COUNT=1, TRUSTED_PROXY_NETWORKS=["203.0.113.0/24"]) == []


def test_e010_a_negative_trusted_proxy_count():
    """-1 passed: client_ip then raised IndexError or read an entry a client wrote."""
    assert ids(TRUSTED_PROXY_COUNT=-1) == ["scheduler.E010"]


@pytest.mark.django_db
def test_manage_py_check_reports_them_and_check_deploy_the_deployment_ones():
    with override_settings(**{**DEPLOYED, "SECRET_KEY": "changeme",
                              "SCHEDULER": {"PRIORITY_CLASSES": "0-4:1"}}):
        with pytest.raises(SystemCheckError) as plain:
            call_command("check", tag=[TAG, WEB_TAG])
        with pytest.raises(SystemCheckError) as deploy:
            call_command("check", tag=[TAG, WEB_TAG], deploy=True)
    assert "scheduler.E005" in str(plain.value) and "scheduler.E001" not in str(plain.value)
    assert "scheduler.E001" in str(deploy.value) and "scheduler.E005" in str(deploy.value)


@pytest.mark.django_db
def test_a_daemon_refuses_to_start_on_any_scheduler_error_but_not_the_web_ones(no_serving):  # noqa: F811
    with override_settings(**{**DEPLOYED, "SCHEDULER": {"PRIORITY_CLASSES": "0-4:1"}}), \
            pytest.raises(InsecureStart, match="scheduler.E005"):
        call_command("runworker", "--burst")
    with override_settings(**{**DEPLOYED, "ALLOWED_HOSTS": ["*"]}), \
            pytest.raises(WouldServe):
        call_command("runworker", "--burst")
