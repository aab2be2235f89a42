"""The admin's job pages (docs/admin.md): the list, the change page and the actions.

The job list shows each schedule in words (cron-descriptor) beside its cron expression,
the next run, the status as shown (jobs/lifecycle.py: a one-off job with no run left is
``finished``) and the last run's outcome, all annotated in SQL (no query per row). Pause,
resume, trigger and cancel call jobs/services.py, the functions the REST API calls, and
report how many jobs they changed. A job is created through ``services.create_job`` (the
same validation as the API); afterwards its name, payload, priority, timeout, attempt
budget and a cron job's schedule may be edited, through ``services.update_job`` (the
PATCH of the API): only the changed fields are written, so an edit never overwrites
``next_run_at`` or ``status`` moved meanwhile by the scheduler or an action, and a new
cron expression or timezone recomputes ``next_run_at``. Jobs are never deleted here:
cancel keeps their history."""

import json
from functools import lru_cache
from zoneinfo import ZoneInfo

from cron_descriptor import (
    FormatException,
    MissingFieldException,
    Options,
    WrongArgumentException,
    get_description,
)
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.options import ActionLocation
from django.db.models import OuterRef, Q, Subquery
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from jobs import services
from jobs.admin.forms import FLOW_KEYS, JobChangeForm, JobCreateForm
from jobs.admin.list_filters import HandlerFilter, KindFilter, StatusFilter
from jobs.guards import ManagedJob, managed
from jobs.lifecycle import shown_status, with_shown_status
from jobs.models import Job
from jobs.schedules import cron, zones
from jobs.tenants import QuotaExceeded
from runs.admin.cells import cut
from runs.admin.helpers import (
    QueueFilter,
    confirm_then,
    format_duration,
    report_count,
    stamp,
    timestamp_column,
    with_timing,
)
from runs.models import PENDING_STATES, TERMINAL_STATES, Run
from runs.outbound import redact
from scheduler_core.exceptions import InvalidJob, SchedulerError

BOTH = [ActionLocation.CHANGE_LIST, ActionLocation.CHANGE_FORM]
RECENT_RUNS = 20
UPCOMING = 5
TRIGGER_MAX = 1000  # jobs one "trigger now" may touch: each is its own transaction

_DESCRIBE_OPTIONS = Options()
_DESCRIBE_OPTIONS.use_24hour_time_format = True


@lru_cache(maxsize=4096)
def describe_cron(expression: str) -> str:
    """``"30 9 * * 1-5"`` -> ``"At 09:30, Monday through Friday"`` (cron-descriptor, 24-hour
    clock); an expression it cannot read is returned unchanged."""
    try:
        return get_description(expression, _DESCRIBE_OPTIONS)
    except (FormatException, MissingFieldException, WrongArgumentException, ValueError,
            IndexError):
        return expression


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    # What an operator scans for comes first, and the schedule is one column (words, then
    # the expression and its zone), so status and last run fit a 1366 px window with the
    # navigation sidebar open (docs/admin.md, "Screen width").
    list_display = ("name_cell", "status_display", "last_run_outcome", "next_run",
                    "schedule_column", "handler_cell", "owner_cell")
    list_filter = (StatusFilter, HandlerFilter, QueueFilter, KindFilter, "owner")
    search_fields = ("=id", "name", "handler", "owner__username", "schedule__cron")
    search_help_text = "Job id, name, handler, owner's username or cron expression."
    list_select_related = ("owner", "schedule")
    ordering = ("-id",)
    show_full_result_count = False
    list_per_page = 50
    actions = ["pause_jobs", "resume_jobs", "resume_jobs_latest", "resume_jobs_all",
               "trigger_jobs", "cancel_jobs"]
    readonly_fields = ("owner", "handler", "queue", "status_display", "schedule_in_words",
                       "cron_expression", "timezone_name", "misfire_policy_display",
                       "run_at_display", "retry", "expires_at", "expires_in_s",
                       "next_run", "upcoming", "last_run_outcome", "recent_runs",
                       "created", "updated", "rate_key", "concurrency_key", "concurrency_limit",
                       "on_success", "on_failure")
    fieldsets = [
        (None, {"fields": ["name", ("owner", "status_display"), "handler", "payload"]}),
        ("When", {"fields": [("schedule_in_words", "cron_expression", "timezone_name"),
                             ("misfire_policy_display", "run_at_display"),
                             ("next_run", "last_run_outcome"),
                             "upcoming"]}),
        ("How", {"fields": [("queue", "priority"), ("timeout_s", "max_attempts"),
                            "retry", ("expires_at", "expires_in_s"),
                            ("rate_key", "concurrency_key", "concurrency_limit"),
                            ("on_success", "on_failure")]}),
        ("Recent runs", {"fields": ["recent_runs"], "classes": ["recent-runs"]}),
        ("History", {"fields": [("created", "updated")], "classes": ["collapse"]}),
    ]
    # A cron job's change page: its schedule is editable (JobChangeForm).
    cron_when = ("When", {"fields": ["schedule_in_words", "cron", "timezone",
                                     "misfire_policy", "max_lag_s", "jitter_s",
                                     ("next_run", "last_run_outcome"), "upcoming"]})
    add_fieldsets = [
        (None, {"fields": ["name", "handler", "payload"]}),
        ("When", {"fields": ["run_at", "cron", "timezone", "misfire_policy", "max_lag_s"]}),
        ("How", {"fields": ["queue", "priority", "timeout_s", "max_attempts", "retry",
                            "expires_at", "expires_in_s", *FLOW_KEYS, "on_success", "on_failure"]}),
    ]

    class Media:
        css = {"all": ["runs/admin.css"]}

    # ---- queryset and columns ------------------------------------------------------

    run_at_display = timestamp_column("run_at", "run at (one-off)")
    created = timestamp_column("created_at", "created")
    updated = timestamp_column("updated_at", "updated")

    def get_queryset(self, request):
        runs = Run.objects.filter(job=OuterRef("pk"))
        last = runs.filter(Q(started_at__isnull=False) | Q(state__in=TERMINAL_STATES)) \
            .order_by("-scheduled_at")
        pending = runs.filter(state__in=PENDING_STATES).order_by("run_at")
        return with_shown_status(super().get_queryset(request)).annotate(
            last_run_id=Subquery(last.values("pk")[:1]),
            last_run_state=Subquery(last.values("state")[:1]),
            next_pending_at=Subquery(pending.values("run_at")[:1]),
        )

    # Long values are cut in the list, whole on hover, so a row fits 1280 px.
    @admin.display(description="name", ordering="name")
    def name_cell(self, job):
        return cut(job.name)

    @admin.display(description="handler", ordering="handler")
    def handler_cell(self, job):
        return cut(job.handler, narrow=True)

    @admin.display(description="owner", ordering="owner__username")
    def owner_cell(self, job):
        return cut(job.owner.username, narrow=True) if job.owner_id else "-"

    @admin.display(description="schedule")
    def schedule_in_words(self, job):
        if job.schedule_id is None:
            return "once"
        return describe_cron(job.schedule.cron)

    @admin.display(description="schedule", ordering="schedule__cron")
    def schedule_column(self, job):
        if job.schedule_id is None:
            return "once"
        return format_html('{}<br><code>{}</code> <span class="quiet">{}</span>',
                           describe_cron(job.schedule.cron), job.schedule.cron,
                           job.schedule.timezone)

    @admin.display(description="cron", ordering="schedule__cron")
    def cron_expression(self, job):
        if job.schedule_id is None:
            return "-"
        return format_html("<code>{}</code>", job.schedule.cron)

    @admin.display(description="timezone", ordering="schedule__timezone")
    def timezone_name(self, job):
        return job.schedule.timezone if job.schedule_id else "-"

    @admin.display(description="misfire policy")
    def misfire_policy_display(self, job):
        return job.schedule.get_misfire_policy_display() if job.schedule_id else "-"

    # Beside the schedule's own timezone column, the header says which zone this is in
    # (stamp(): the site's TIME_ZONE).
    @admin.display(description=f"next run ({settings.TIME_ZONE})")
    def next_run(self, job):
        if job.status != Job.Status.ACTIVE:
            return "-"
        candidates = [t for t in (getattr(job, "next_pending_at", None), job.next_run_at) if t]
        return stamp(min(candidates)) if candidates else "-"

    @admin.display(description="status", ordering="status")
    def status_display(self, job):
        status = shown_status(job)
        return format_html('<span class="job-status-{}">{}</span>', status, status)

    @admin.display(description="last run")
    def last_run_outcome(self, job):
        if not getattr(job, "last_run_id", None):
            return "-"
        url = reverse("admin:runs_run_change", args=[job.last_run_id])
        return format_html('<a href="{}" class="run-state run-state-{}">{}</a>', url,
                           job.last_run_state, job.last_run_state)

    @admin.display(description="next occurrences")
    def upcoming(self, job):
        if job.schedule_id is None or job.status != Job.Status.ACTIVE:
            return "-"
        # Stored before a rule or a tz database change: say so instead of a 500.
        if problems := zones.stored_problems(job.schedule.cron, job.schedule.timezone,
                                             remedy="edit it below"):
            return "; ".join(problems.values())
        zone = ZoneInfo(job.schedule.timezone)
        moment, times = timezone.now(), []
        for _ in range(UPCOMING):
            moment = cron.next_after(job.schedule.cron, job.schedule.timezone, moment)
            times.append(f"{moment.astimezone(zone):%Y-%m-%d %H:%M %Z}")
        return ", ".join(times)

    @admin.display(description="recent runs")
    def recent_runs(self, job):
        runs = list(with_timing(Run.objects.filter(job=job)).order_by("-scheduled_at")
                    [:RECENT_RUNS])
        for run in runs:
            run.lag_text, run.duration_text = format_duration(run.lag), format_duration(
                run.duration)
        return render_to_string("admin/jobs/recent_runs.html", {
            "runs": runs, "limit": RECENT_RUNS,
            "all_url": reverse("admin:runs_run_changelist") + f"?job={job.pk}",
            "logs_url": reverse("admin:runs_logline_changelist") + f"?job={job.pk}",
        })

    # ---- forms: create through the service, edit only safe fields --------------------

    def get_fieldsets(self, request, obj=None):
        if obj is None:
            return self.add_fieldsets
        fieldsets = self.fieldsets
        if obj.schedule_id is not None:
            fieldsets = [self.cron_when if name == "When" else (name, options)
                         for name, options in fieldsets]
        if not self.has_change_permission(request, obj):
            # Read-only pages show a model field's raw value: an http job's encrypted
            # headers must go through shown_payload instead (docs/http-handler.md).
            fieldsets = [(name, {**options, "fields": [
                "shown_payload" if field == "payload" else field
                for field in options["fields"]]}) for name, options in fieldsets]
        return fieldsets

    @admin.display(description="payload")
    def shown_payload(self, job):
        return json.dumps(redact.shown_payload(job.handler, job.payload), indent=2,
                          ensure_ascii=False)

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else self.readonly_fields

    def get_form(self, request, obj=None, change=False, **kwargs):
        kwargs["form"] = JobCreateForm if obj is None else JobChangeForm
        form = super().get_form(request, obj, change=change, **kwargs)
        form.owner = request.user  # whose bounds a new job must keep (jobs/tenants.py)
        return form

    def save_form(self, request, form, change):
        if change:
            return form.instance  # written by services.update_job in save_model
        spec = dict(form.spec)
        options = {"name": spec["name"], "queue": spec.get("queue") or "default",
                   "priority": spec.get("priority", 5), **form.flow, **{
                       key: spec.get(key) for key in (
                           "timeout_s", "max_attempts", "retry", "expires_at",
                           "expires_in_s", "on_success", "on_failure")}}
        if spec.get("cron"):
            options.update(cron=spec["cron"], timezone=spec["timezone"],
                           misfire_policy=spec["misfire_policy"], max_lag_s=spec["max_lag_s"])
        else:
            options["run_at"] = spec["run_at"]
        return services.create_job(spec["handler"], spec.get("payload") or {},
                                   owner=request.user, **options)

    def save_model(self, request, obj, form, change):
        if not change:
            return  # stored by services.create_job in save_form
        changes = form.changes()
        if not changes:
            return
        try:
            services.update_job(obj.pk, changes)
        except (InvalidJob, SchedulerError) as exc:
            # Checked in the form; this is a race (cancelled meanwhile, run started).
            self.message_user(request, f"Nothing was changed: {exc}", messages.ERROR)

    def save_related(self, request, form, formsets, change):
        return None  # a job has no many-to-many fields or inlines

    def has_delete_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        # A workflow's node job is shown, never edited: its writes belong to the workflow
        # (jobs/guards.py), so its page is a view, as the REST API answers 409.
        if obj is not None and managed([obj.pk]):
            return False
        return super().has_change_permission(request, obj)

    # ---- actions: the service functions, with counts -----------------------------------

    def _refused(self, request, queryset, verb: str) -> bool:
        """Whether a selected job is a workflow's node, which the services refuse
        (jobs/guards.py): the action then changes nothing and says which."""
        found = managed(queryset.values_list("pk", flat=True))
        if found:
            job_id = min(found)
            self.message_user(request, f"Nothing was {verb}: "
                              f"{ManagedJob(job_id, found[job_id], verb)}", messages.ERROR)
        return bool(found)

    @admin.action(description="Pause selected jobs", permissions=["change"], location=BOTH)
    def pause_jobs(self, request, queryset):
        if self._refused(request, queryset, "paused"):
            return
        ids = list(queryset.values_list("pk", flat=True))
        report_count(self, request, services.pause(ids), len(ids), "paused",
                     "only active jobs can be paused")

    # Resume's catch_up (docs/cron.md, "Pause and resume"), one action per choice.
    @admin.action(description="Resume selected jobs (skip what was scheduled while paused)",
                  permissions=["change"], location=BOTH)
    def resume_jobs(self, request, queryset):
        self._resume(request, queryset, "skip")

    @admin.action(description="Resume selected jobs and run the latest occurrence held by "
                              "the pause", permissions=["change"], location=BOTH)
    def resume_jobs_latest(self, request, queryset):
        self._resume(request, queryset, "latest")

    @admin.action(description="Resume selected jobs and run every occurrence held by the "
                              "pause (within max lag)", permissions=["change"], location=BOTH)
    def resume_jobs_all(self, request, queryset):
        self._resume(request, queryset, "all")

    def _resume(self, request, queryset, catch_up: str) -> None:
        if self._refused(request, queryset, "resumed"):
            return
        ids = list(queryset.values_list("pk", flat=True))
        # Refused whole: catch-up runs over the quota (docs/cron.md), or a stored
        # schedule that no longer reads, its field named (jobs/schedules/zones.py).
        try:
            resumed = services.resume(ids, catch_up=catch_up)
        except (QuotaExceeded, InvalidJob) as exc:
            self.message_user(request, f"Nothing was resumed: {exc}", messages.ERROR)
            return
        report_count(self, request, resumed, len(ids), "resumed",
                     "only paused jobs can be resumed")

    @admin.action(description="Trigger selected jobs now (one extra run each)",
                  permissions=["change"], location=BOTH)
    def trigger_jobs(self, request, queryset):
        ids = list(queryset.values_list("pk", flat=True)[:TRIGGER_MAX + 1])
        if len(ids) > TRIGGER_MAX:
            self.message_user(request, f"Trigger at most {TRIGGER_MAX} jobs at a time; "
                                       f"nothing was triggered.", messages.ERROR)
            return
        if self._refused(request, queryset, "triggered"):
            return
        runs, why = [], {}  # reason -> jobs refused for it
        seen = {pk: (owner, status) for pk, owner, status in queryset.filter(
            pk__in=ids).values_list("pk", "owner__username", "status")}
        for job_id in ids:
            owner, status = seen.get(job_id, (None, None))
            try:
                runs.append(services.trigger(job_id))
            except QuotaExceeded as exc:  # an owner at max_pending: not "not active"
                reason = f"owner {owner}'s {exc}"
                why[reason] = why.get(reason, 0) + 1
            except SchedulerError as exc:
                reason = ("only active jobs can be triggered" if status != Job.Status.ACTIVE
                          else str(exc))
                why[reason] = why.get(reason, 0) + 1
        report_count(self, request, len(runs), len(ids), "triggered",
                     "; ".join(f"{reason} ({count})" for reason, count in why.items()))
        if len(runs) == 1:
            url = reverse("admin:runs_run_change", args=[runs[0].pk])
            self.message_user(request, format_html('Run <a href="{}">{}</a> is queued.',
                                                   url, runs[0].pk), messages.INFO)

    @admin.action(description="Cancel selected jobs (and their pending runs)",
                  permissions=["change"], location=BOTH)
    def cancel_jobs(self, request, queryset):
        if self._refused(request, queryset, "cancelled"):
            return None
        return confirm_then(
            self, request, queryset, verb="cancel", done="cancelled",
            explanation="Cancelled jobs create no more runs and cannot be resumed; their "
                        "pending runs are cancelled. A run already running finishes.",
            apply=services.cancel,
            skipped_reason="they were already cancelled",
            describe=lambda job: job.status,
        )
