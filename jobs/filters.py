"""Query filters of GET /api/jobs/ (django-filter); ordering is DRF's OrderingFilter on
JOB_ORDERING."""

from datetime import UTC

import django_filters as filters
from django import forms
from django_filters.fields import IsoDateTimeField

from jobs.lifecycle import SHOWN_STATUSES
from jobs.models import Job

JOB_ORDERING = ("id", "name", "priority", "status", "created_at", "updated_at", "next_run_at")


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


class JobFilter(filters.FilterSet):
    """``status`` (as shown, ``finished`` included: jobs/lifecycle.py; may repeat),
    ``handler``, ``queue`` (exact), ``recurring`` (true: cron jobs, false: one-off jobs),
    ``name`` (contains, case-insensitive), ``created_after`` / ``created_before`` (ISO
    8601; a naive time is read as UTC)."""

    status = filters.MultipleChoiceFilter(choices=SHOWN_STATUSES, field_name="shown_status")
    handler = filters.CharFilter()
    queue = filters.CharFilter()
    recurring = filters.BooleanFilter(field_name="schedule", lookup_expr="isnull",
                                      exclude=True, label="true: cron jobs; false: one-off")
    name = filters.CharFilter(lookup_expr="icontains")
    created_after = UtcIsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = UtcIsoDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = Job
        fields = ["status", "handler", "queue", "recurring", "name"]
