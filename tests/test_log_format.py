"""LOG_FORMAT (docs/alerts.md, "Logs"): plain lines by default, one JSON object per line
with LOG_FORMAT=json, the fields of a run's outcome line as keys."""

import json
import logging
import logging.config
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from runs.execution.transitions import run_refs
from runs.models import Run
from scheduler_project.logging_config import django_logging, gunicorn_logging, log_format
from tests.conftest import ROOT, daemon_env, make_runs


def formatted(monkeypatch, value: str, config=django_logging, logger="scheduler") -> str:
    monkeypatch.setenv("LOG_FORMAT", value)
    logging.config.dictConfig(config("INFO") if config is django_logging else config())
    try:
        handler = logging.getLogger(logger).handlers[0]
        record = logging.LogRecord("scheduler.runs", logging.INFO, __file__, 1,
                                   "run %s succeeded", (7,), None)
        record.run_id, record.outcome, record.duration_s = 7, "succeeded", 0.25
        return handler.format(record)
    finally:
        monkeypatch.delenv("LOG_FORMAT")
        from django.conf import settings
        logging.config.dictConfig(settings.LOGGING)


def test_json_lines_carry_the_message_and_the_records_fields_as_keys(monkeypatch):
    line = formatted(monkeypatch, "json")

    data = json.loads(line)
    assert data["message"] == "run 7 succeeded"
    assert (data["level"], data["logger"]) == ("INFO", "scheduler.runs")
    assert (data["run_id"], data["outcome"], data["duration_s"]) == (7, "succeeded", 0.25)
    assert "time" in data


def test_text_is_the_default_and_gunicorn_follows_the_same_setting(monkeypatch):
    assert formatted(monkeypatch, "").endswith(" INFO scheduler.runs run 7 succeeded")
    line = formatted(monkeypatch, "json", gunicorn_logging, "gunicorn.error")
    assert json.loads(line)["run_id"] == 7


def test_an_unknown_format_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("LOG_FORMAT", "xml")
    with pytest.raises(ImproperlyConfigured, match="LOG_FORMAT must be one of text, json, "
                                                   "not 'xml'"):
        log_format()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_worker_with_log_format_json_prints_only_json_lines(rb):
    runs = make_runs("default", 3, handler="always_fails", max_attempts=1)
    rb.push(run_refs(Run.objects.filter(pk__in=[r.pk for r in runs])))
    env = daemon_env("redis", LOG_FORMAT="json")
    env["LOG_FORMAT"] = "json"
    out = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "runworker", "--burst", "--concurrency",
         "1"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)

    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in (out.stdout + out.stderr).splitlines()]
    outcomes = [line for line in lines if line["logger"] == "scheduler.runs"]
    assert sorted(line["run_id"] for line in outcomes) == sorted(r.pk for r in runs)
    assert {(line["handler"], line["attempt"], line["outcome"], line["state"])
            for line in outcomes} == {("always_fails", 1, "failed", "dead")}
    assert all(line["duration_s"] >= 0 for line in outcomes)
    assert any(line["logger"] == "scheduler.worker" for line in lines)


@pytest.mark.parametrize("value", ["text", "json"])
def test_gunicorn_takes_the_configuration(monkeypatch, value):
    from gunicorn.config import Config
    from gunicorn.glogging import Logger

    monkeypatch.setenv("LOG_FORMAT", value)
    config = Config()
    config.set("logconfig_dict", gunicorn_logging())
    try:
        Logger(config).error("the web server says %s", "hello")
    finally:
        from django.conf import settings
        logging.config.dictConfig(settings.LOGGING)


@pytest.mark.parametrize("value, level", [("", "INFO"), ("true", "INFO"),
                                          ("false", "WARNING"), ("off", "WARNING")])
def test_log_run_outcomes_false_keeps_only_the_deaths(monkeypatch, value, level):
    monkeypatch.setenv("LOG_RUN_OUTCOMES", value)
    assert django_logging("INFO")["loggers"]["scheduler.runs"]["level"] == level


def test_log_run_outcomes_refuses_a_typo(monkeypatch):
    monkeypatch.setenv("LOG_RUN_OUTCOMES", "flase")
    with pytest.raises(ImproperlyConfigured, match="LOG_RUN_OUTCOMES must be true or false"):
        django_logging("INFO")


def test_a_refused_host_header_is_one_line_and_other_errors_keep_their_traceback():
    from django.conf import settings

    logging.config.dictConfig(django_logging("INFO"))
    try:
        try:
            raise ValueError("boom")
        except ValueError:
            exc_info = sys.exc_info()
        lines = {}
        for name in ("django.security.DisallowedHost", "django.request"):
            logger = logging.getLogger(name)
            handler = (logger.handlers or logging.getLogger("django").handlers)[0]
            record = logger.makeRecord(name, logging.ERROR, __file__, 1,
                                       "Invalid HTTP_HOST header: 'evil'", (), exc_info)
            assert handler.filter(record)
            lines[name] = handler.format(record)
    finally:
        logging.config.dictConfig(settings.LOGGING)

    assert lines["django.security.DisallowedHost"].endswith("Invalid HTTP_HOST header: 'evil'")
    assert "Traceback" not in lines["django.security.DisallowedHost"]
    assert "Traceback" in lines["django.request"]


def test_a_client_error_adds_no_line_and_a_server_error_keeps_its_own():
    """Django logged "Bad Request: /api/jobs/" at WARNING for every 4xx, beside the
    access line: one 400 was two lines on the console."""
    from django.conf import settings

    logging.config.dictConfig(django_logging("INFO"))
    try:
        request_log = logging.getLogger("django.request")
        client, server = (request_log.isEnabledFor(logging.WARNING),
                          request_log.isEnabledFor(logging.ERROR))
    finally:
        logging.config.dictConfig(settings.LOGGING)
    assert (client, server) == (False, True)
