"""The admin's backfill (docs/admin.md, "Backfill"): the action on the job list (and its
workflow twin, workflows/admin/backfill.py) asks for a range on a page of its own, then
backfills each selected cron job through jobs/schedules/backfill.py; the Backfill list shows every
backfill with its progress (occurrences, runs made, skipped, finished).
"""

from collections.abc import Callable

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.options import ActionLocation
from django.db.models import QuerySet
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from jobs.admin.job_admin import JobAdmin
from jobs.models import Backfill
from jobs.schedules.backfill import backfill_job, finished_count
from runs.admin.helpers import ReadOnlyAdmin, timestamp_column
from scheduler_core import conf
from scheduler_core.exceptions import InvalidJob, SchedulerError

BOTH = [ActionLocation.CHANGE_LIST, ActionLocation.CHANGE_FORM]
APPLY_FIELD = "backfill_apply"
SELECTED_MAX = 20  # targets one action may backfill: each is up to a thousand runs
MOMENT_HELP = ("ISO 8601 date-time or date, e.g. 2026-03-01 or 2026-03-01T06:00:00Z; "
               "without an offset, in each schedule's own timezone.")


class BackfillForm(forms.Form):
    """The range: start inclusive, end exclusive (read by jobs.schedules.backfill.parse_moment)."""

    start = forms.CharField(help_text=f"First moment, inclusive. {MOMENT_HELP}")
    end = forms.CharField(help_text=f"Last moment, exclusive. {MOMENT_HELP}")


def backfill_action(modeladmin: admin.ModelAdmin, request, queryset: QuerySet, *,
                    backfill: Callable, noun: str, list_url: str):
    """Run a backfill action: the first POST (from the action menu) shows the range form
    (admin/jobs/backfill.html), reposting the selection; its POST (``backfill_apply``)
    calls ``backfill(pk, start, end, requested_by=user)`` for each selected ``noun``
    ("job", "workflow") and reports, per target, what it made or why it was refused, with
    a link to ``list_url`` (the backfills' list). A bad range re-shows the form naming
    the field. At most SELECTED_MAX targets."""
    ids = list(queryset.order_by("pk").values_list("pk", flat=True)[:SELECTED_MAX + 1])
    if len(ids) > SELECTED_MAX:
        modeladmin.message_user(request, f"Backfill at most {SELECTED_MAX} {noun}s at a "
                                         f"time; nothing was backfilled.", messages.ERROR)
        return None
    form = BackfillForm(request.POST if request.POST.get(APPLY_FIELD) else None)
    if form.is_valid():
        try:
            lines = [_one(backfill, pk, form.cleaned_data, request.user, noun) for pk in ids]
        except InvalidJob as exc:  # the range itself: the same for every target
            for field, why in exc.errors.items():
                form.add_error(field if field in form.fields else None, why)
        else:
            for level, line in lines:
                modeladmin.message_user(request, line, level)
            modeladmin.message_user(request, format_html(
                'Progress: <a href="{}">backfills</a>.', list_url), messages.INFO)
            return None
    opts = modeladmin.model._meta
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": f"Backfill {len(ids)} {noun}{'s' if len(ids) != 1 else ''}",
        "opts": opts, "form": form, "objects": queryset.filter(pk__in=ids),
        "limit": conf.get("BACKFILL_MAX_OCCURRENCES"),
        "repost": [(key, value) for key in request.POST
                   if key not in ("csrfmiddlewaretoken", APPLY_FIELD, "start", "end")
                   for value in request.POST.getlist(key)],
        "apply_field": APPLY_FIELD,
    }
    request.current_app = modeladmin.admin_site.name
    return TemplateResponse(request, "admin/jobs/backfill.html", context)


def _one(backfill: Callable, pk: int, data: dict, user, noun: str) -> tuple[int, str]:
    """Backfill one target; (message level, message). InvalidJob goes up (the range)."""
    try:
        record = backfill(pk, data["start"], data["end"], requested_by=user)
    except SchedulerError as exc:
        if isinstance(exc, InvalidJob):
            raise
        return messages.ERROR, f"{noun.capitalize()} {pk} was not backfilled: {exc}"
    return messages.SUCCESS, (
        f"{noun.capitalize()} {pk}: {record.total} occurrences, {record.made} runs made, "
        f"{record.skipped} skipped (they had one already).")


@admin.action(description="Backfill selected cron jobs over a past range…",
              permissions=["change"], location=BOTH)
def backfill_jobs(modeladmin, request, queryset):
    """The job list's action (jobs/admin/job_admin.py lists it)."""
    return backfill_action(modeladmin, request, queryset, backfill=backfill_job, noun="job",
                           list_url=reverse("admin:jobs_backfill_changelist"))


class BackfillAdminBase(ReadOnlyAdmin):
    """A list of backfills with their progress; nothing is edited here. ``finished`` is
    counted from the runs (one indexed count per row shown)."""

    list_display_common = ("range", "total", "made", "skipped", "finished", "progress",
                           "requested_by", "created")
    list_select_related = ("requested_by",)
    ordering = ("-id",)
    list_per_page = 50
    created = timestamp_column("created_at", "created")
    finished_counter: Callable = staticmethod(finished_count)

    @admin.display(description="range [start, end)")
    def range(self, record):
        return f"{record.start:%Y-%m-%d %H:%M} – {record.end:%Y-%m-%d %H:%M} UTC"

    @admin.display(description="finished")
    def finished(self, record):
        return self.finished_counter(record)

    @admin.display(description="progress")
    def progress(self, record):
        # This process's clock, not a query per row: skew is small beside STOPPED_AFTER.
        return self.progress_text(record, timezone.now())

    @staticmethod
    def progress_text(record, now) -> str:
        """``record``'s progress in words at ``now`` (an aware datetime), by its state
        (jobs/models/backfill.py, BackfillBase.state)."""
        done, state = record.made + record.skipped, record.state(now)
        if state == "failed":
            return f"stopped at {done} of {record.total}: {record.error}"
        if state == "stopped":
            return (f"stopped at {done} of {record.total}: its process ended before it "
                    "finished (no progress since "
                    f"{(record.progress_at or record.created_at):%Y-%m-%d %H:%M} UTC); "
                    "run it again to make the rest")
        return f"{done} of {record.total}" + (" (done)" if state == "done" else " (making)")


@admin.register(Backfill)
class BackfillAdmin(BackfillAdminBase):
    """Backfills of cron jobs (jobs/schedules/backfill.py)."""

    list_display = ("id", "job_link", *BackfillAdminBase.list_display_common)
    list_select_related = ("job", "requested_by")
    search_fields = ("=job__id", "job__name")
    search_help_text = "Job id or name."

    @admin.display(description="job", ordering="job_id")
    def job_link(self, record):
        return format_html('<a href="{}">{}</a>', reverse("admin:jobs_job_change",
                                                          args=[record.job_id]), record.job)


# The job list offers the action. Added here, not in job_admin.py's ``actions``, which
# is at the module size cap (tests/test_import_graph.py); the admin reads the class's
# list on each request.
JobAdmin.actions = [*JobAdmin.actions, backfill_jobs]
