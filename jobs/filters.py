"""Query filters of GET /api/jobs/ (django-filter); ordering is DRF's OrderingFilter on
JOB_ORDERING."""

import django_filters as filters

from jobs.lifecycle import SHOWN_STATUSES
from jobs.models import Job
from runs.filters import UtcIsoDateTimeFilter

JOB_ORDERING = ("id", "name", "priority", "status", "created_at", "updated_at", "next_run_at")


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
