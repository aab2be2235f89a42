"""The jobs side of the admin console (docs/admin.md).

The job list shows each schedule in words (cron-descriptor) beside its cron expression,
the next run and the last run's outcome, all annotated in SQL (no query per row). Pause,
resume, trigger and cancel call jobs/services.py, the functions the REST API calls, and
report how many jobs they changed. A job is created through ``services.create_job`` (the
same validation as the API); afterwards only its name, payload, priority, timeout and
attempt budget may be edited, and only the changed columns are written, so an edit never
overwrites ``next_run_at`` or ``status`` moved meanwhile by the scheduler or an action.
Jobs are never deleted here: cancel keeps their history.
"""

from functools import lru_cache
from zoneinfo import ZoneInfo

from cron_descriptor import (
    FormatException,
    MissingFieldException,
    Options,
    WrongArgumentException,
    get_description,
)
from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.options import ActionLocation
from django.db.models import DurationField, ExpressionWrapper, F, OuterRef, Q, Subquery
from django.db.models.functions import Now
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from jobs import cron, services, tenants
from jobs.exceptions import InvalidJob, SchedulerError
from jobs.models import Job, MisfirePolicy, OwnerPolicy, SchedulerPartition
from jobs.registry import handler_names
from jobs.validation import validate_job
from runs.admin_helpers import (
    QueueFilter,
    confirm_then,
    format_duration,
    report_count,
    stamp,
    timestamp_column,
    with_timing,
)
from runs.limits import sync_owner_limits
from runs.models import PENDING_STATES, TERMINAL_STATES, Run

BOTH = [ActionLocation.CHANGE_LIST, ActionLocation.CHANGE_FORM]
EDITABLE = ("name", "payload", "priority", "timeout_s", "max_attempts")
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
    title = "kind"
    parameter_name = "kind"

    def lookups(self, request, model_admin):
        return [("cron", "recurring (cron)"), ("once", "one-off")]

    def queryset(self, request, queryset):
        if self.value() == "cron":
            return queryset.filter(schedule__isnull=False)
        if self.value() == "once":
            return queryset.filter(schedule__isnull=True)
        return queryset


def job_spec(job: Job, **changes) -> dict:
    """The ``validate_job`` spec of an existing job with ``changes`` applied."""
    spec = {field: getattr(job, field) for field in ("name", "handler", "payload", "queue",
                                                     "priority", "timeout_s", "max_attempts")}
    if job.schedule_id:
        spec.update(cron=job.schedule.cron, timezone=job.schedule.timezone,
                    misfire_policy=job.schedule.misfire_policy, max_lag_s=job.schedule.max_lag_s)
    else:
        spec["run_at"] = job.run_at
    spec.update(changes)
    return spec


def add_invalid_job_errors(form: forms.Form, exc: InvalidJob, aliases: dict) -> None:
    """Put each field error of ``exc`` on the form field it names (``aliases`` maps the
    service's names to the form's), or on the form when no field matches."""
    for field, reason in exc.errors.items():
        field = aliases.get(field, field)
        form.add_error(field if field in form.fields else None,
                       reason if field in form.fields else f"{field}: {reason}")


class JobCreateForm(forms.ModelForm):
    """Create a job the way the API does: ``validate_job`` checks it, then
    ``services.create_job`` stores it (and a one-off job's run) in one transaction."""

    handler = forms.ChoiceField(choices=())
    payload = forms.JSONField(initial=dict, required=False,
                              help_text="A JSON object passed to the handler.")
    cron = forms.CharField(
        required=False, label="cron schedule",
        help_text="Five fields (minute hour day month weekday) or @hourly, @daily …; "
                  "leave empty for a one-off job.")
    timezone = forms.CharField(initial="UTC", required=False, help_text="IANA timezone.")
    misfire_policy = forms.ChoiceField(choices=MisfirePolicy.choices,
                                       initial=MisfirePolicy.RUN_ONCE)
    max_lag_s = forms.IntegerField(
        min_value=0, required=False, label="max lag (s)",
        help_text="Missed occurrences older than this are dropped (default 3600).")

    class Meta:
        model = Job
        fields = ["name", "handler", "payload", "run_at", "cron", "timezone",
                  "misfire_policy", "max_lag_s", "queue", "priority", "timeout_s",
                  "max_attempts"]
        help_texts = {
            "run_at": "When a one-off job runs. Leave this and the cron schedule empty to "
                      "run once now.",
            "priority": "0 is most urgent, 9 least.",
            "timeout_s": "Seconds one attempt may take.",
            "max_attempts": "Attempts before the run goes to the dead letter (first try "
                            "included).",
        }

    owner = None  # the user creating the job: JobAdmin.get_form sets it

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # A blank first choice: no handler is picked for the operator (the first name
        # alphabetically was always_fails).
        self.fields["handler"].choices = [("", "---------"),
                                          *((name, name) for name in handler_names())]
        self.spec: dict | None = None

    def clean(self):
        data = self.cleaned_data
        if self.errors:
            return data
        spec = {key: data.get(key) for key in ("name", "handler", "queue", "priority",
                                               "timeout_s", "max_attempts")}
        spec["payload"] = {} if data.get("payload") in (None, "") else data["payload"]
        if data.get("cron"):
            spec.update(cron=data["cron"], timezone=data.get("timezone") or "UTC",
                        misfire_policy=data.get("misfire_policy"))
            if data.get("max_lag_s") is not None:
                spec["max_lag_s"] = data["max_lag_s"]
        else:
            spec["run_at"] = data.get("run_at") or timezone.now()
        bounds = tenants.bounds_of(self.owner.pk if self.owner else None)
        try:
            self.spec = validate_job(spec)
            if bounds is not None:
                if problems := tenants.field_problems(spec, bounds):
                    raise InvalidJob(problems)
                tenants.check_quotas(bounds, 1, 0 if spec.get("cron") else 1)
        except InvalidJob as exc:
            add_invalid_job_errors(self, exc, {"schedule": "cron"})
        except tenants.QuotaExceeded as exc:
            self.add_error(None, str(exc))
        return data

    def validate_unique(self):
        # The job does not exist yet as a model instance: services.create_job validates
        # (validate_job above) and the database constraints still guard the insert.
        return None


class JobChangeForm(forms.ModelForm):
    """Edit the fields that are safe to change on a live job; validated by
    ``validate_job`` like a new job, so the admin accepts what the API accepts."""

    class Meta:
        model = Job
        fields = list(EDITABLE)

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        changes = {k: data[k] for k in EDITABLE if k in data}
        bounds = tenants.bounds_of(self.instance.owner_id)
        changed = {k: v for k, v in changes.items() if v != getattr(self.instance, k)}
        try:
            validate_job(job_spec(self.instance, **changes))
            if bounds is not None and (problems := tenants.field_problems(changed, bounds)):
                raise InvalidJob(problems)
        except InvalidJob as exc:
            add_invalid_job_errors(self, exc, {})
        return data


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ("name", "owner", "handler", "schedule_in_words", "cron_expression",
                    "timezone_name", "next_run", "status_display", "last_run_outcome")
    list_filter = ("status", HandlerFilter, QueueFilter, KindFilter, "owner")
    search_fields = ("=id", "name", "handler", "owner__username", "schedule__cron")
    search_help_text = "Job id, name, handler, owner's username or cron expression."
    list_select_related = ("owner", "schedule")
    ordering = ("-id",)
    show_full_result_count = False
    list_per_page = 50
    actions = ["pause_jobs", "resume_jobs", "resume_jobs_latest", "resume_jobs_all",
               "trigger_jobs", "cancel_jobs"]
    readonly_fields = ("owner", "handler", "queue", "status_display", "schedule_in_words",
                       "cron_expression", "timezone_name", "misfire_policy", "run_at_display",
                       "next_run", "upcoming", "last_run_outcome", "recent_runs",
                       "created", "updated")
    fieldsets = [
        (None, {"fields": ["name", ("owner", "status_display"), "handler", "payload"]}),
        ("When", {"fields": [("schedule_in_words", "cron_expression", "timezone_name"),
                             ("misfire_policy", "run_at_display"),
                             ("next_run", "last_run_outcome"),
                             "upcoming"]}),
        ("How", {"fields": [("queue", "priority"), ("timeout_s", "max_attempts")]}),
        ("Recent runs", {"fields": ["recent_runs"], "classes": ["recent-runs"]}),
        ("History", {"fields": [("created", "updated")], "classes": ["collapse"]}),
    ]
    add_fieldsets = [
        (None, {"fields": ["name", "handler", "payload"]}),
        ("When", {"fields": ["run_at", "cron", "timezone", "misfire_policy", "max_lag_s"]}),
        ("How", {"fields": ["queue", "priority", "timeout_s", "max_attempts"]}),
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
        return super().get_queryset(request).annotate(
            last_run_id=Subquery(last.values("pk")[:1]),
            last_run_state=Subquery(last.values("state")[:1]),
            next_pending_at=Subquery(pending.values("run_at")[:1]),
        )

    @admin.display(description="schedule")
    def schedule_in_words(self, job):
        if job.schedule_id is None:
            return "once"
        return describe_cron(job.schedule.cron)

    @admin.display(description="cron", ordering="schedule__cron")
    def cron_expression(self, job):
        if job.schedule_id is None:
            return "-"
        return format_html("<code>{}</code>", job.schedule.cron)

    @admin.display(description="timezone", ordering="schedule__timezone")
    def timezone_name(self, job):
        return job.schedule.timezone if job.schedule_id else "-"

    @admin.display(description="misfire policy")
    def misfire_policy(self, job):
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
        return format_html('<span class="job-status-{}">{}</span>', job.status, job.status)

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
        return self.add_fieldsets if obj is None else self.fieldsets

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else self.readonly_fields

    def get_form(self, request, obj=None, change=False, **kwargs):
        kwargs["form"] = JobCreateForm if obj is None else JobChangeForm
        form = super().get_form(request, obj, change=change, **kwargs)
        form.owner = request.user  # whose bounds a new job must keep (jobs/tenants.py)
        return form

    def save_form(self, request, form, change):
        if change:
            return form.save(commit=False)
        spec = dict(form.spec)
        options = {
            "name": spec["name"], "queue": spec.get("queue") or "default",
            "priority": spec.get("priority", 5), "timeout_s": spec.get("timeout_s"),
            "max_attempts": spec.get("max_attempts"),
        }
        if spec.get("cron"):
            options.update(cron_expr=spec["cron"], timezone_name=spec["timezone"],
                           misfire_policy=spec["misfire_policy"], max_lag_s=spec["max_lag_s"])
        else:
            options["run_at"] = spec["run_at"]
        return services.create_job(spec["handler"], spec.get("payload") or {},
                                   owner=request.user, **options)

    def save_model(self, request, obj, form, change):
        if not change:
            return  # stored by services.create_job in save_form
        fields = [f for f in form.changed_data if f in EDITABLE]
        if fields:
            Job.objects.filter(pk=obj.pk).update(
                **{f: getattr(obj, f) for f in fields}, updated_at=timezone.now())

    def save_related(self, request, form, formsets, change):
        return None  # a job has no many-to-many fields or inlines

    def has_delete_permission(self, request, obj=None):
        return False

    # ---- actions: the service functions, with counts -----------------------------------

    @admin.action(description="Pause selected jobs", permissions=["change"], location=BOTH)
    def pause_jobs(self, request, queryset):
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
        ids = list(queryset.values_list("pk", flat=True))
        report_count(self, request, services.resume(ids, catch_up=catch_up), len(ids),
                     "resumed", "only paused jobs can be resumed")

    @admin.action(description="Trigger selected jobs now (one extra run each)",
                  permissions=["change"], location=BOTH)
    def trigger_jobs(self, request, queryset):
        ids = list(queryset.values_list("pk", flat=True)[:TRIGGER_MAX + 1])
        if len(ids) > TRIGGER_MAX:
            self.message_user(request, f"Trigger at most {TRIGGER_MAX} jobs at a time; "
                                       f"nothing was triggered.", messages.ERROR)
            return
        runs = []
        for job_id in ids:
            try:
                runs.append(services.trigger(job_id))
            except SchedulerError:
                continue  # paused or cancelled: counted as left alone below
        report_count(self, request, len(runs), len(ids), "triggered",
                     "only active jobs can be triggered")
        if len(runs) == 1:
            url = reverse("admin:runs_run_change", args=[runs[0].pk])
            self.message_user(request, format_html('Run <a href="{}">{}</a> is queued.',
                                                   url, runs[0].pk), messages.INFO)

    @admin.action(description="Cancel selected jobs (and their pending runs)",
                  permissions=["change"], location=BOTH)
    def cancel_jobs(self, request, queryset):
        return confirm_then(
            self, request, queryset, verb="cancel", done="cancelled",
            explanation="Cancelled jobs create no more runs and cannot be resumed; their "
                        "pending runs are cancelled. A run already running finishes.",
            apply=services.cancel,
            skipped_reason="they were already cancelled",
            describe=lambda job: job.status,
        )


@admin.register(OwnerPolicy)
class OwnerPolicyAdmin(admin.ModelAdmin):
    """Per-owner bounds, queues and default (tenant) queue (docs/isolation.md, "Tenant
    bounds"). Saving goes through jobs.tenants.set_owner_policy so the broker enforces a
    new concurrency limit at once."""

    list_display = ("owner", "max_running", "max_pending", "max_jobs", "highest_priority",
                    "max_timeout_s", "max_attempts", "queues", "default_queue", "updated_at")
    search_fields = ("owner__username", "queues", "default_queue")
    raw_id_fields = ("owner",)

    def save_model(self, request, obj, form, change):
        values = {field: getattr(obj, field) for field in
                  (*tenants.POLICY_FIELDS, "queues", "default_queue")}
        obj.pk = tenants.set_owner_policy(obj.owner, **values).pk

    def delete_model(self, request, obj):
        super().delete_model(request, obj)
        sync_owner_limits()

    def delete_queryset(self, request, queryset):
        super().delete_queryset(request, queryset)
        sync_owner_limits()


@admin.register(SchedulerPartition)
class SchedulerPartitionAdmin(admin.ModelAdmin):
    """Which scheduler owns which partition of job ids, read-only (schedulers take and
    renew these leases themselves)."""

    list_display = ("number", "owner", "lease_expires", "lease_state")
    lease_expires = timestamp_column("lease_expires_at", "lease expires")
    ordering = ("number",)
    search_fields = ("owner",)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def get_queryset(self, request):
        # Leases are judged on the database clock, like the schedulers judge them.
        return super().get_queryset(request).annotate(lease_left=ExpressionWrapper(
            F("lease_expires_at") - Now(), output_field=DurationField()))

    @admin.display(description="lease")
    def lease_state(self, partition):
        if not partition.owner or partition.lease_left is None:
            return "unowned"
        left = partition.lease_left.total_seconds()
        return f"live, {left:.0f} s left" if left > 0 else f"expired {-left:.0f} s ago"
