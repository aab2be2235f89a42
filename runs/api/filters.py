"""Query filters of /api/runs/, /api/runs/{id}/logs/ and /api/dead-letter/ (django-filter).

Times are ISO 8601; a naive time is read as UTC. Ranges are half-open: ``*_after`` is
inclusive, ``*_before`` exclusive.
"""

import logging
from datetime import UTC

import django_filters as filters
from django import forms
from django_filters.fields import IsoDateTimeField

from runs.models import LogLine, Run, RunState

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
          "error": logging.ERROR, "critical": logging.CRITICAL}


class UtcIsoDateTimeField(IsoDateTimeField):
    """ISO 8601, converted to UTC here: PostgreSQL refuses offsets beyond +-15:59 that
    Python accepts, and a time whose UTC equivalent leaves years 1-9999 is refused."""

    def to_python(self, value):
        parsed = super().to_python(value)
        if parsed is None:
            return None
        try:
            return parsed.astimezone(UTC)
        except OverflowError:
            raise forms.ValidationError("is outside the years 1-9999 in UTC") from None


class UtcIsoDateTimeFilter(filters.IsoDateTimeFilter):
    """An IsoDateTimeFilter whose value reaches the database in UTC (see the field)."""

    field_class = UtcIsoDateTimeField


class RunFilter(filters.FilterSet):
    """``job`` (id), ``state`` (may repeat), ``queue``, ``handler``,
    ``scheduled_after`` / ``scheduled_before``, ``finished_after`` / ``finished_before``."""

    job = filters.NumberFilter(field_name="job_id")
    # No DISTINCT (django-filter's default for a multiple choice): state is the run's own
    # column, no join repeats a row, and SELECT DISTINCT keeps the run_scheduled index
    # from serving the page (every matching run sorted: 30 s at 10 M, BENCHMARKS.md).
    state = filters.MultipleChoiceFilter(choices=RunState.choices, distinct=False)
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
