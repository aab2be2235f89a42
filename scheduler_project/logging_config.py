"""The logging configuration of every daemon and of the web server (docs/alerts.md,
"Logs"): plain lines by default, one JSON object per line with LOG_FORMAT=json.

JSON lines come from python-json-logger's formatter: the keys ``time``, ``level``,
``logger`` and ``message``, then every extra field of the record (a run's outcome line
carries ``run_id``, ``job_id``, ``handler``, ``attempt``, ``outcome``, ``state`` and
``duration_s``, runs/execution/outcomes.py), and ``exc_info`` with the traceback when there is one.
"""

import logging
import os

from django.core.exceptions import ImproperlyConfigured

FORMATS = ("text", "json")
LINE = "%(asctime)s %(levelname)s %(name)s %(message)s"


def log_format() -> str:
    """LOG_FORMAT from the environment: "text" (the default) or "json"; anything else is
    an ImproperlyConfigured error naming it."""
    value = os.environ.get("LOG_FORMAT", "text").strip().lower() or "text"
    if value not in FORMATS:
        raise ImproperlyConfigured(f"LOG_FORMAT must be one of {', '.join(FORMATS)}, "
                                   f"not {value!r}")
    return value


def formatter() -> dict:
    """The ``formatters`` entry of a dictConfig for the configured LOG_FORMAT."""
    if log_format() == "json":
        return {"()": "pythonjsonlogger.json.JsonFormatter", "format": LINE,
                "rename_fields": {"asctime": "time", "levelname": "level",
                                  "name": "logger"}}
    return {"format": LINE}


def run_outcomes_level(scheduler_level: str) -> str:
    """The level of ``scheduler.runs``, the worker's line per run outcome: as the other
    scheduler loggers, or WARNING (deaths only) with LOG_RUN_OUTCOMES=false. Each line
    costs the worker's main loop about 10-13 us (docs/alerts.md, "Logs")."""
    value = os.environ.get("LOG_RUN_OUTCOMES", "true").strip().lower()
    if value not in ("true", "false", "1", "0", "yes", "no", "on", "off", ""):
        raise ImproperlyConfigured(f"LOG_RUN_OUTCOMES must be true or false, not {value!r}")
    if value in ("false", "0", "no", "off"):
        return "WARNING"
    return scheduler_level


class NoTraceback(logging.Filter):
    """Drops a record's traceback, keeping its line: a refused Host header
    (django.security.DisallowedHost) is a client's mistake or a scanner, and Django logs
    each with its full traceback at ERROR, 20 lines of our own code's frames for one
    bad request."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info = None
        record.exc_text = None
        return True


class LoginOutcome(logging.Filter):
    """One line per login outcome from django-axes (docs/security.md): a successful
    login, a failure, a lockout. Axes also logs, at INFO, the bookkeeping around each one
    (expired attempts cleaned up, counters reset, "login failed, running database
    handler"): four lines for one admin login."""

    OUTCOMES = ("AXES: Successful login",)

    def filter(self, record: logging.LogRecord) -> bool:
        return (record.levelno >= logging.WARNING
                or str(record.msg).startswith(self.OUTCOMES))


def django_logging(scheduler_level: str) -> dict:
    """settings.LOGGING: Django's warnings and the scheduler's loggers (``scheduler.*``
    at ``scheduler_level``; ``scheduler.runs`` as run_outcomes_level says) to the
    console."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"line": formatter()},
        "filters": {"no_traceback": {"()": NoTraceback},
                    "login_outcome": {"()": LoginOutcome}},
        # A StreamHandler whose lines a thread may hold and write at once: the worker's
        # outcome lines (scheduler_core/logs.py).
        "handlers": {"console": {"class": "scheduler_core.logs.ConsoleHandler",
                                 "formatter": "line"},
                     "console_line": {"class": "logging.StreamHandler", "formatter": "line",
                                      "filters": ["no_traceback"]},
                     "console_login": {"class": "logging.StreamHandler", "formatter": "line",
                                       "filters": ["login_outcome"]}},
        "loggers": {
            # Django's default sends request errors (500s with their traceback, refused
            # Host headers) to the console only with DEBUG on, and otherwise to ADMINS by
            # mail, which nobody configures here: with DEBUG off they would be lost.
            "django": {"handlers": ["console"], "level": "WARNING", "propagate": False},
            # A 4xx is the client's mistake, answered and in the access log; Django adds a
            # WARNING line for each ("Bad Request: /api/jobs/"). 5xx stay, at ERROR.
            "django.request": {"level": "ERROR"},
            "django.security.DisallowedHost": {"handlers": ["console_line"],
                                               "level": "WARNING", "propagate": False},
            "scheduler": {"handlers": ["console"], "level": scheduler_level,
                          "propagate": False},
            "scheduler.runs": {"level": run_outcomes_level(scheduler_level)},
            "axes": {"handlers": ["console_login"], "level": "INFO", "propagate": False},
        },
    }


def gunicorn_logging() -> dict:
    """gunicorn's ``logconfig_dict`` (gunicorn.conf.py): its error and access logs to
    stderr and stdout in the configured format."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"line": formatter()},
        "handlers": {
            "error": {"class": "logging.StreamHandler", "formatter": "line",
                      "stream": "ext://sys.stderr"},
            "access": {"class": "logging.StreamHandler", "formatter": "line",
                       "stream": "ext://sys.stdout"},
        },
        # gunicorn lays this over its own defaults, whose root logger names a handler
        # "console": the root is given here so that name is not looked for.
        "root": {"level": "INFO", "handlers": ["error"]},
        "loggers": {
            "gunicorn.error": {"handlers": ["error"], "level": "INFO", "propagate": False},
            "gunicorn.access": {"handlers": ["access"], "level": "INFO",
                                "propagate": False},
        },
    }
