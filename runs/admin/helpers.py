"""Pieces shared by the jobs and runs admin (docs/admin.md): lag and duration annotated in
SQL, list filters the stock admin lacks (time range, id input, queue, log level), and a
confirmation page for actions that cannot be undone.

Actions change runs only through the service functions (docs/architecture.md,
"Conventions in the code"); these helpers only read and render.
"""

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from django.contrib import admin, messages
from django.db.models import DurationField, ExpressionWrapper, F, OuterRef, QuerySet, Subquery
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.html import format_html
from django.utils.text import capfirst
from redis.exceptions import RedisError

from runs.brokers import get_broker
from runs.models import LAG_FROM, Attempt
from scheduler_core.exceptions import SchedulerError

CONFIRM_FIELD = "confirm"
CONFIRM_LIST_MAX = 100  # objects listed on a confirmation page; the rest are counted


def with_timing(queryset: QuerySet) -> QuerySet:
    """Annotate runs with ``first_started_at`` (the first attempt's start), ``lag``
    (first attempt's start minus ``scheduled_at``, or ``created_at`` if later, as
    docs/admin.md defines it) and
    ``duration`` (``finished_at`` minus ``started_at``, the last attempt's start), all in
    SQL so a list page costs the same few queries for 10 rows or 100. Both are timedeltas,
    or None while the run has not started or finished."""
    first_start = Attempt.objects.filter(run=OuterRef("pk")).order_by("number")
    return queryset.annotate(
        first_started_at=Subquery(first_start.values("started_at")[:1]),
    ).annotate(
        lag=ExpressionWrapper(F("first_started_at") - LAG_FROM,
                              output_field=DurationField()),
        duration=ExpressionWrapper(F("finished_at") - F("started_at"),
                                   output_field=DurationField()),
    )


def format_duration(value: timedelta | None) -> str:
    """A timedelta for people: ``0.042 s``, ``12.5 s``, ``3 m 07 s``, ``2 h 05 m``, or
    ``-`` for None. Negative values keep their sign."""
    if value is None:
        return "-"
    total = value.total_seconds()
    sign, total = ("-" if total < 0 else ""), abs(total)
    if total < 10:
        return f"{sign}{total:.3f} s"
    if total < 60:
        return f"{sign}{total:.1f} s"
    if total < 3600:
        return f"{sign}{int(total // 60)} m {int(total % 60):02d} s"
    if total < 86400:
        return f"{sign}{int(total // 3600)} h {int(total % 3600 // 60):02d} m"
    return f"{sign}{int(total // 86400)} d {int(total % 86400 // 3600):02d} h"


def stamp(value: datetime | None, precise: bool = False) -> str:
    """A time for operators: ``2026-01-31 14:05:09`` in the site's timezone (with
    milliseconds when ``precise``), ``-`` for None. The admin's default format drops the
    seconds, which a scheduler cannot spare."""
    if value is None:
        return "-"
    local = timezone.localtime(value)
    return local.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] if precise else \
        local.strftime("%Y-%m-%d %H:%M:%S")


def timestamp_column(field: str, description: str, precise: bool = False):
    """An admin column (and read-only field) showing ``field`` through ``stamp``,
    sortable by the field."""

    @admin.display(description=description, ordering=field)
    def column(self, obj):
        return stamp(getattr(obj, field), precise)

    column.__name__ = f"{field}_display"
    return column


LEVELS = [
    (logging.DEBUG, "DEBUG"), (logging.INFO, "INFO"), (logging.WARNING, "WARNING"),
    (logging.ERROR, "ERROR"), (logging.CRITICAL, "CRITICAL"),
]


def level_name(level: int) -> str:
    """The logging name of a numeric level (``30`` -> ``WARNING``; unknown: ``Level 25``)."""
    return logging.getLevelName(level)


class LevelFilter(admin.SimpleListFilter):
    """Log lines at or above a level: "WARNING" shows warnings, errors and criticals,
    which is what someone hunting a failure wants."""

    title = "level (at least)"
    parameter_name = "level"

    def lookups(self, request, model_admin):
        return [(str(number), name) for number, name in LEVELS]

    def queryset(self, request, queryset):
        value = self.value()
        if value is None:
            return queryset
        if not value.isdigit():
            messages.warning(request, f"level: {value!r} is not a log level number; ignored")
            return queryset
        return queryset.filter(level__gte=int(value))


def kept_params(request, drop: list[str]) -> list[tuple[str, str]]:
    """The query parameters of a change list page except ``drop`` and the page number, for
    a filter form that must keep the other filters, the search and the ordering."""
    return [(key, value) for key in request.GET if key not in (*drop, "p", "e")
            for value in request.GET.getlist(key)]


class InputFilter(admin.SimpleListFilter):
    """A filter with a text box instead of a list of choices, for values with too many
    possibilities to list (ids). Subclasses give ``title``, ``parameter_name``, ``lookup``
    (the ORM path the value is matched against) and ``placeholder``."""

    template = "admin/runs/filters/input.html"
    lookup = ""
    placeholder = ""

    def lookups(self, request, model_admin):
        return ()

    def has_output(self):
        return True

    def choices(self, changelist):
        # The template renders a form; it needs the other parameters to keep them.
        self.other_params = kept_params(self.request, [self.parameter_name])
        yield {
            "selected": self.value() is None,
            "query_string": changelist.get_query_string(remove=[self.parameter_name]),
            "display": "All",
        }

    def queryset(self, request, queryset):
        value = self.value()
        if value is None or value.strip() == "":
            return queryset
        value = value.strip()
        if not value.isdigit():
            messages.warning(request, f"{self.title}: {value!r} is not an id (a whole "
                                      f"number); filter ignored")
            return queryset
        return queryset.filter(**{self.lookup: int(value)})


class JobIdFilter(InputFilter):
    title = "job id"
    parameter_name = "job"
    lookup = "job_id"
    placeholder = "e.g. 12"


class QueueFilter(admin.SimpleListFilter):
    """Queues the broker knows (never a DISTINCT over the runs table, which is the big
    one), plus whatever queue the URL names."""

    title = "queue"
    parameter_name = "queue"
    field = "queue"

    def lookups(self, request, model_admin):
        try:
            names = {d.queue for d in get_broker().depth()}
        except (SchedulerError, RedisError):
            names = set()
        if self.value():
            names.add(self.value())
        return [(name, name) for name in sorted(names)]

    def queryset(self, request, queryset):
        return queryset.filter(**{self.field: self.value()}) if self.value() else queryset


class TimeRangeFilter(admin.ListFilter):
    """Rows whose ``field_path`` lies in [since, until): two date-time inputs plus presets
    (last 15 minutes, hour, day, week). Times without an offset are read in the site's
    timezone (``TIME_ZONE``, UTC by default). A value that is not a date-time is reported
    with a warning naming it and ignored, rather than failing the whole page.

    Use ``TimeRangeFilter.on("created_at", "time")`` in ``list_filter``."""

    template = "admin/runs/filters/time_range.html"
    field_path = ""
    PRESETS = [("last 15 min", timedelta(minutes=15)), ("last hour", timedelta(hours=1)),
               ("last 24 h", timedelta(days=1)), ("last 7 days", timedelta(days=7))]

    @classmethod
    def on(cls, field_path: str, title: str) -> type["TimeRangeFilter"]:
        return type(f"TimeRangeFilter_{field_path}", (cls,),
                    {"field_path": field_path, "title": title})

    def __init__(self, request, params, model, model_admin):
        super().__init__(request, params, model, model_admin)
        self.since_param = f"{self.field_path}__gte"
        self.until_param = f"{self.field_path}__lt"
        self.bounds: dict[str, datetime] = {}
        for param in (self.since_param, self.until_param):
            if param in params:
                raw = params.pop(param)[-1]
                self.used_parameters[param] = raw
                if raw.strip():
                    moment = self.parse(raw)
                    if moment is None:
                        messages.warning(request, f"{self.title}: {raw!r} is not a date and "
                                                  f"time like 2026-01-31T14:05; ignored")
                    else:
                        self.bounds[param] = moment

    @staticmethod
    def parse(raw: str) -> datetime | None:
        """An aware datetime from ISO text (``2026-01-31T14:05``, ``2026-01-31 14:05:09``,
        with or without offset); None if it is not one."""
        try:
            moment = parse_datetime(raw.strip())
        except ValueError:
            return None
        if moment is None:
            return None
        if timezone.is_naive(moment):
            moment = timezone.make_aware(moment, timezone.get_current_timezone())
        return moment

    def has_output(self):
        return True

    def expected_parameters(self):
        return [self.since_param, self.until_param]

    def queryset(self, request, queryset):
        return queryset.filter(**self.bounds) if self.bounds else queryset

    def local_input(self, param: str) -> str:
        """The value for an ``<input type="datetime-local">`` (site timezone, no offset)."""
        moment = self.bounds.get(param)
        if moment is None:
            return ""
        return timezone.localtime(moment).replace(tzinfo=None).isoformat(timespec="seconds")

    def choices(self, changelist):
        now = timezone.localtime().replace(microsecond=0, tzinfo=None)
        self.other_params = kept_params(self.request, self.expected_parameters())
        self.since_value = self.local_input(self.since_param)
        self.until_value = self.local_input(self.until_param)
        self.tz_name = timezone.get_current_timezone_name()
        yield {
            "selected": not self.bounds,
            "query_string": changelist.get_query_string(remove=self.expected_parameters()),
            "display": "Any time",
        }
        for label, span in self.PRESETS:
            since = (now - span).isoformat(timespec="seconds")
            yield {
                "selected": self.used_parameters.get(self.since_param) == since,
                "query_string": changelist.get_query_string(
                    {self.since_param: since}, remove=[self.until_param]),
                "display": label,
            }


def confirm_then(modeladmin: admin.ModelAdmin, request, queryset: QuerySet, *,
                 verb: str, done: str, explanation: str, apply: Callable[[list[int]], int],
                 skipped_reason: str = "",
                 describe: Callable[[object], str] | None = None) -> TemplateResponse | None:
    """Run an irreversible bulk action only after a confirmation page.

    The first POST (from the action menu) renders runs/templates/admin/runs/confirm_action.html,
    listing the selected objects and reposting the same action form fields with
    ``confirm=yes``; the second POST calls ``apply(ids)`` (a service function returning how
    many objects it changed) and reports that count (``done`` is the past tense of
    ``verb``) and how many were left alone, with ``skipped_reason``. Returns the
    confirmation page, or None so the admin redirects back with the message.
    ``describe(obj)`` gives a short note shown beside each listed object (e.g. why a run
    died)."""
    if request.POST.get(CONFIRM_FIELD) != "yes":
        total = queryset.count()
        opts = modeladmin.model._meta
        context = {
            **modeladmin.admin_site.each_context(request),
            "title": f"{capfirst(verb)} {total} {noun(modeladmin, total)}?",
            "opts": opts,
            "verb": verb,
            "explanation": explanation,
            "objects": [(obj, describe(obj) if describe else "")
                        for obj in queryset[:CONFIRM_LIST_MAX]],
            "total": total,
            "more": max(total - CONFIRM_LIST_MAX, 0),
            "repost": [(key, value) for key in request.POST
                       if key not in ("csrfmiddlewaretoken", CONFIRM_FIELD)
                       for value in request.POST.getlist(key)],
            "confirm_field": CONFIRM_FIELD,
        }
        request.current_app = modeladmin.admin_site.name
        return TemplateResponse(request, "admin/runs/confirm_action.html", context)
    ids = list(queryset.values_list("pk", flat=True))
    changed = apply(ids)
    report_count(modeladmin, request, changed, len(ids), done, skipped_reason)
    return None


def noun(modeladmin: admin.ModelAdmin, count: int) -> str:
    """What ``count`` objects of this admin are called in messages: the admin's
    ``action_noun`` (singular, plural) when it sets one, else the model's verbose names."""
    opts = modeladmin.model._meta
    one, many = getattr(modeladmin, "action_noun", (opts.verbose_name, opts.verbose_name_plural))
    return one if count == 1 else many


def report_count(modeladmin: admin.ModelAdmin, request, changed: int, selected: int,
                 verb_past: str, reason: str = "") -> None:
    """Tell the operator how many selected objects an action changed, and how many it left
    alone (with ``reason`` when known), through the admin's messages."""
    modeladmin.message_user(request, f"{capfirst(verb_past)}: {changed} "
                                     f"{noun(modeladmin, changed)}.",
                            messages.SUCCESS if changed else messages.WARNING)
    skipped = selected - changed
    if skipped > 0:
        modeladmin.message_user(
            request,
            f"{skipped} of the {selected} selected left alone{': ' + reason if reason else ''}.",
            messages.WARNING,
        )


def admin_link(obj, text=None) -> str:
    """An HTML link to ``obj``'s admin page (escaped)."""
    opts = obj._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])
    return format_html('<a href="{}">{}</a>', url, text if text is not None else obj)


LOG_LINES_ON_RUN_PAGE = 2000  # more than this: the run page links to the log search


class RunIdFilter(InputFilter):
    title = "run id"
    parameter_name = "run"
    lookup = "run_id"
    placeholder = "e.g. 345"


def error_summary(error: str, width: int = 160) -> str:
    """The line of an error that says what went wrong: a traceback's last line (the
    exception and its message), else the first line; cut to ``width`` characters."""
    lines = [line.strip() for line in (error or "").strip().splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[-1] if lines[0].startswith("Traceback") else lines[0]
    return line if len(line) <= width else line[: width - 1] + "…"


class ReadOnlyAdmin(admin.ModelAdmin):
    """No add, change or delete through forms; what changes, changes by actions."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def has_operate_permission(self, request) -> bool:
        """May run the actions on runs (requeue, cancel, discard): ``runs.change_run``."""
        return request.user.has_perm("runs.change_run")


def with_attempt_timing(queryset):
    """Attempts with ``duration`` (finished minus started) annotated, in number order."""
    return queryset.annotate(duration=ExpressionWrapper(
        F("finished_at") - F("started_at"), output_field=DurationField(),
    )).order_by("number")
