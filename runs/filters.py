"""Query filters of /api/runs/, /api/runs/{id}/logs/ and /api/dead-letter/ (django-filter).

Times are ISO 8601; a naive time is read as UTC. Ranges are half-open: ``*_after`` is
inclusive, ``*_before`` exclusive.
"""

import logging

import django_filters as filters
from django import forms

from jobs.filters import UtcIsoDateTimeFilter
from runs.models import LogLine, Run, RunState

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
          "error": logging.ERROR, "critical": logging.CRITICAL}


class RunFilter(filters.FilterSet):
    """``job`` (id), ``state`` (may repeat), ``queue``, ``handler``,
    ``scheduled_after`` / ``scheduled_before``, ``finished_after`` / ``finished_before``."""

    job = filters.NumberFilter(field_name="job_id")
    state = filters.MultipleChoiceFilter(choices=RunState.choices)
    queue = filters.CharFilter()
    handler = filters.CharFilter(field_name="job__handler")
    scheduled_after = UtcIsoDateTimeFilter(field_name="scheduled_at", lookup_expr="gte")
    scheduled_before = UtcIsoDateTimeFilter(field_name="scheduled_at", lookup_expr="lt")
    finished_after = UtcIsoDateTimeFilter(field_name="finished_at", lookup_expr="gte")
    finished_before = UtcIsoDateTimeFilter(field_name="finished_at", lookup_expr="lt")

    class Meta:
        model = Run
        fields = ["job", "state", "queue", "handler"]


class DeadLetterFilter(filters.FilterSet):
    """``job``, ``queue``, ``handler``, ``finished_after`` / ``finished_before``."""

    job = filters.NumberFilter(field_name="job_id")
    queue = filters.CharFilter()
    handler = filters.CharFilter(field_name="job__handler")
    finished_after = UtcIsoDateTimeFilter(field_name="finished_at", lookup_expr="gte")
    finished_before = UtcIsoDateTimeFilter(field_name="finished_at", lookup_expr="lt")

    class Meta:
        model = Run
        fields = ["job", "queue", "handler"]


class LevelField(forms.CharField):
    """A logging level: a name (debug, info, warning, error, critical; any case) or a
    number 0-100."""

    def to_python(self, value):
        value = super().to_python(value)
        if value in ("", None):
            return None
        if value.lower() in LEVELS:
            return LEVELS[value.lower()]
        if value.isdigit() and int(value) <= 100:
            return int(value)
        raise forms.ValidationError(
            "give a level name (debug, info, warning, error, critical) or a number 0-100")


class LevelFilter(filters.Filter):
    field_class = LevelField


class LogLineFilter(filters.FilterSet):
    """``level``: this level and above (name or number); ``q``: text the message contains
    (case-insensitive); ``attempt``: the attempt number; ``logger``: the logger name."""

    level = LevelFilter(field_name="level", lookup_expr="gte")
    q = filters.CharFilter(field_name="message", lookup_expr="icontains")
    attempt = filters.NumberFilter(field_name="attempt__number")
    logger = filters.CharFilter()

    class Meta:
        model = LogLine
        fields = ["level", "q", "attempt", "logger"]
