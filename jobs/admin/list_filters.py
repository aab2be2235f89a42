"""List filters of the admin's job list (docs/admin.md)."""

from django.contrib import admin

from jobs import node_job_lists
from jobs.lifecycle import SHOWN_STATUSES, with_shown_status
from scheduler_core.registry import handler_names


class StatusFilter(admin.SimpleListFilter):
    """The status as shown (jobs/lifecycle.py): active, paused, cancelled or finished."""

    title = "status"
    parameter_name = "status"

    def lookups(self, request, model_admin):
        return SHOWN_STATUSES

    def queryset(self, request, queryset):
        if not self.value():
            return queryset
        if "shown_status" not in queryset.query.annotations:
            queryset = with_shown_status(queryset)
        return queryset.filter(shown_status=self.value())


class HandlerFilter(admin.SimpleListFilter):
    """Registered handler names (from the registry, not a DISTINCT over every job)."""

    title = "handler"
    parameter_name = "handler"

    def lookups(self, request, model_admin):
        names = set(handler_names())
        if self.value():
            names.add(self.value())
        return [(name, name) for name in sorted(names)]

    def queryset(self, request, queryset):
        return queryset.filter(handler=self.value()) if self.value() else queryset


class KindFilter(admin.SimpleListFilter):
    """Recurring or one-off jobs; a workflow's node jobs (named "workflow/node", made and
    run by the workflow: jobs/node_job_lists.py) only when asked for, as the REST list."""

    title = "kind"
    parameter_name = "kind"

    def lookups(self, request, model_admin):
        return [("cron", "recurring (cron)"), ("once", "one-off"),
                ("node", "workflow nodes"), ("all", "all, workflow nodes too")]

    def queryset(self, request, queryset):
        if self.value() == "all":
            return queryset
        if self.value() == "node":
            return queryset.filter(node_job_lists.node_q())
        queryset = node_job_lists.plain(queryset)
        if self.value() == "cron":
            return queryset.filter(schedule__isnull=False)
        if self.value() == "once":
            return queryset.filter(schedule__isnull=True)
        return queryset

