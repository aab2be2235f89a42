"""Query filters of GET /api/jobs/ (django-filter); ordering is StrictOrderingFilter
(scheduler_core/rest/ordering.py) on JOB_ORDERING."""

import django_filters as filters

from jobs import node_job_lists
from jobs.lifecycle import SHOWN_STATUSES
from jobs.models import Job
from runs.api.filters import UtcIsoDateTimeFilter

JOB_ORDERING = ("id", "name", "priority", "status", "created_at", "updated_at", "next_run_at")


class JobFilter(filters.FilterSet):
    """``status`` (as shown, ``finished`` included: jobs/lifecycle.py; may repeat),
    ``handler``, ``queue`` (exact), ``recurring`` (true: cron jobs, false: one-off jobs),
    ``name`` (contains, case-insensitive), ``created_after`` / ``created_before`` (ISO
    8601; a naive time is read as UTC), ``nodes`` (``exclude``, the default: no
    workflow's node jobs; ``include``; ``only``), ``workflow`` (that workflow's node jobs;
    jobs/node_job_lists.py)."""

    NODES = [("exclude", "plain jobs only (the default)"),
             ("include", "plain jobs and workflows' node jobs"),
             ("only", "workflows' node jobs only")]

    status = filters.MultipleChoiceFilter(choices=SHOWN_STATUSES, field_name="shown_status")
    handler = filters.CharFilter()
    queue = filters.CharFilter()
    # A choice, not a BooleanFilter: that reads anything but true/false as "not given"
    # and served the unfiltered list for ?recurring=yes.
    recurring = filters.ChoiceFilter(choices=[("true", "cron jobs"), ("false", "one-off jobs")],
                                     method="filter_recurring", empty_label=None,
                                     label="true: cron jobs; false: one-off")
    name = filters.CharFilter(lookup_expr="icontains")
    created_after = UtcIsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = UtcIsoDateTimeFilter(field_name="created_at", lookup_expr="lt")
    # Without nodes or workflow the list leaves node jobs out: JobViewSet.filter_queryset.
    nodes = filters.ChoiceFilter(choices=NODES, method="filter_nodes", empty_label=None,
                                 label="workflows' node jobs: exclude (default), include, "
                                       "only")
    workflow = filters.NumberFilter(method="filter_workflow",
                                    label="the node jobs of this workflow id")

    def filter_recurring(self, queryset, name, value):
        return queryset.filter(schedule__isnull=value != "true")

    def filter_nodes(self, queryset, name, value):
        if value == "only":
            return queryset.filter(node_job_lists.node_q())
        return node_job_lists.plain(queryset) if value == "exclude" else queryset

    def filter_workflow(self, queryset, name, value):
        return node_job_lists.of_workflow(queryset, int(value))

    class Meta:
        model = Job
        fields = ["status", "handler", "queue", "recurring", "name"]
