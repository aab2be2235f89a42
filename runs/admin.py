"""The runs side of the admin console (docs/admin.md).

Runs, attempts, log lines and workers are read-only here: no add, change or delete. Only
actions change runs, and each action calls the same service function as the REST API
(runs/services.py), never ``save()`` on a run (docs/architecture.md, "Conventions in the
code"). Actions need the ``runs.change_run`` permission (superusers have it);
irreversible ones go through a confirmation page.
"""

import json
from datetime import timedelta

from django.contrib import admin
from django.contrib.admin.options import ActionLocation
from django.db.models import (
    BooleanField,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    OuterRef,
    Q,
    Subquery,
)
from django.db.models.functions import Coalesce
from django.http import HttpResponseRedirect
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.html import format_html

from jobs import conf
from runs import services
from runs.admin_helpers import (
    InputFilter,
    JobIdFilter,
    LevelFilter,
    QueueFilter,
    TimeRangeFilter,
    confirm_then,
    format_duration,
    level_name,
    timestamp_column,
    with_timing,
)
from runs.clock import db_now
from runs.models import Attempt, DeadRun, LogLine, Run, RunState, WorkerProcess

BOTH = [ActionLocation.CHANGE_LIST, ActionLocation.CHANGE_FORM]
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


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ("id", "job_link", "state_badge", "queue", "scheduled", "started",
                    "finished", "lag_display", "duration_display", "attempts_display",
                    "worker_id")
    list_display_links = ("id",)
    list_filter = ("state", QueueFilter, JobIdFilter,
                   TimeRangeFilter.on("scheduled_at", "scheduled"),
                   TimeRangeFilter.on("finished_at", "finished"))
    search_fields = ("=id", "job__name", "job__handler", "worker_id")
    search_help_text = "Run id, job name or handler, worker id."
    list_select_related = ("job",)
    ordering = ("-id",)
    show_full_result_count = False
    list_per_page = 50
    actions = ["requeue_runs", "cancel_runs"]
    readonly_fields = ("job_link", "state_badge", "lag_display", "duration_display",
                       "attempts_display", "error_pre", "result_pre", "attempts_and_logs",
                       "scheduled", "started", "finished", "run_at_display",
                       "lease_expires", "created")
    fieldsets = [
        (None, {"fields": [("job_link", "state_badge"), ("queue", "shard", "priority"),
                           ("scheduled", "run_at_display", "jitter_s"),
                           ("attempts_display", "worker_id", "lease_expires"),
                           "created"]}),
        ("Timing", {"fields": [("started", "finished"),
                               ("lag_display", "duration_display")]}),
        ("Outcome", {"fields": ["error_pre", "result_pre"]}),
        ("Attempts and their logs", {"fields": ["attempts_and_logs"],
                                     "classes": ["attempts-and-logs"]}),
    ]

    class Media:
        css = {"all": ["runs/admin.css"]}

    scheduled = timestamp_column("scheduled_at", "scheduled")
    run_at_display = timestamp_column("run_at", "may start at")
    started = timestamp_column("started_at", "started")
    finished = timestamp_column("finished_at", "finished")
    lease_expires = timestamp_column("lease_expires_at", "lease expires")
    created = timestamp_column("created_at", "created")

    def get_queryset(self, request):
        return with_timing(super().get_queryset(request))

    @admin.display(description="job", ordering="job__name")
    def job_link(self, run):
        url = reverse("admin:jobs_job_change", args=[run.job_id])
        return format_html('<a href="{}">{}</a> <span class="quiet">#{}</span>', url,
                           run.job.name, run.job_id)

    @admin.display(description="state", ordering="state")
    def state_badge(self, run):
        return format_html('<span class="run-state run-state-{}">{}</span>', run.state,
                           run.state)

    @admin.display(description="lag", ordering="lag")
    def lag_display(self, run):
        return format_duration(run.lag)

    @admin.display(description="duration", ordering="duration")
    def duration_display(self, run):
        return format_duration(run.duration)

    @admin.display(description="attempts", ordering="attempt")
    def attempts_display(self, run):
        return f"{run.attempt} / {run.max_attempts}"

    @admin.display(description="error")
    def error_pre(self, run):
        return format_html("<pre class=\"traceback\">{}</pre>", run.error) if run.error else "-"

    @admin.display(description="result")
    def result_pre(self, run):
        if run.result is None:
            return "-"
        return format_html("<pre>{}</pre>", json.dumps(run.result, indent=2, sort_keys=True))

    @admin.display(description="attempts")
    def attempts_and_logs(self, run):
        attempts = list(with_attempt_timing(Attempt.objects.filter(run=run)))
        lines = list(LogLine.objects.filter(attempt__run=run)
                     .order_by("attempt__number", "id")[:LOG_LINES_ON_RUN_PAGE + 1])
        truncated = len(lines) > LOG_LINES_ON_RUN_PAGE
        by_attempt: dict[int, list] = {}
        for line in lines[:LOG_LINES_ON_RUN_PAGE]:
            line.level_name = level_name(line.level)
            by_attempt.setdefault(line.attempt_id, []).append(line)
        for attempt in attempts:
            attempt.lines = by_attempt.get(attempt.pk, [])
            attempt.duration_text = format_duration(attempt.duration)
        return render_to_string("admin/runs/attempts_and_logs.html", {
            "run": run, "attempts": attempts, "truncated": truncated,
            "log_search_url": reverse("admin:runs_logline_changelist") + f"?run={run.pk}",
        })

    @admin.action(description="Requeue selected runs (dead or cancelled)",
                  permissions=["operate"], location=BOTH)
    def requeue_runs(self, request, queryset):
        return confirm_then(
            self, request, queryset, verb="requeue", done="requeued",
            explanation="Each run goes back to the queue now with a fresh attempt budget "
                        "(its job's max attempts). Only dead or cancelled runs of active "
                        "jobs are requeued.",
            apply=services.requeue,
            skipped_reason="only dead or cancelled runs of active jobs can be requeued",
            describe=lambda run: run.state,
        )

    @admin.action(description="Cancel selected runs (pending or running)",
                  permissions=["operate"], location=BOTH)
    def cancel_runs(self, request, queryset):
        return confirm_then(
            self, request, queryset, verb="cancel", done="cancelled",
            explanation="Pending runs will not start. A running handler is not interrupted, "
                        "but its outcome is refused: the run stays cancelled.",
            apply=services.cancel,
            skipped_reason="only pending or running runs can be cancelled",
            describe=lambda run: run.state,
        )


def with_attempt_timing(queryset):
    """Attempts with ``duration`` (finished minus started) annotated, in number order."""
    return queryset.annotate(duration=ExpressionWrapper(
        F("finished_at") - F("started_at"), output_field=DurationField(),
    )).order_by("number")


@admin.register(DeadRun)
class DeadRunAdmin(RunAdmin):
    """The dead letter: runs whose attempts are exhausted, with the reason each died;
    requeue (fresh attempt budget) or discard them in bulk, after a confirmation page."""

    action_noun = ("dead run", "dead runs")
    list_display = ("id", "job_link", "queue", "scheduled", "died_at",
                    "attempts_display", "last_outcome", "reason")
    list_filter = (QueueFilter, JobIdFilter, TimeRangeFilter.on("finished_at", "died"))
    search_fields = ("=id", "job__name", "job__handler", "error")
    search_help_text = "Run id, job name or handler, text of the error."
    ordering = ("-finished_at", "-id")
    actions = ["requeue_dead", "discard_dead"]

    def changelist_view(self, request, extra_context=None):
        return super().changelist_view(request, {
            "title": "Dead letter: runs whose attempts are exhausted", **(extra_context or {})})

    def get_queryset(self, request):
        last_attempt = Attempt.objects.filter(run=OuterRef("pk")).order_by("-number")
        return super().get_queryset(request).annotate(
            last_outcome=Subquery(last_attempt.values("outcome")[:1]),
        )

    died_at = timestamp_column("finished_at", "died")

    @admin.display(description="last attempt", ordering="last_outcome")
    def last_outcome(self, run):
        return run.last_outcome or "-"

    @admin.display(description="reason")
    def reason(self, run):
        return error_summary(run.error) or "-"

    def _after(self, request, queryset, response):
        # From a dead run's own page the run has left the dead letter: show it as a run.
        if response is None and "CHANGE_FORM-action" in request.POST:
            pks = request.POST.getlist(admin.helpers.ACTION_CHECKBOX_NAME)
            if len(pks) == 1:
                return HttpResponseRedirect(reverse("admin:runs_run_change", args=[pks[0]]))
        return response

    @admin.action(description="Requeue selected dead runs (attempts reset)",
                  permissions=["operate"], location=BOTH)
    def requeue_dead(self, request, queryset):
        return self._after(request, queryset, confirm_then(
            self, request, queryset, verb="requeue", done="requeued",
            explanation="Each run goes back to the queue now with a fresh attempt budget "
                        "(its job's max attempts); its earlier attempts and logs are kept. "
                        "Runs of paused or cancelled jobs are left in the dead letter.",
            apply=services.requeue,
            skipped_reason="their job is paused or cancelled (resume it first)",
            describe=lambda run: error_summary(run.error, 120),
        ))

    @admin.action(description="Discard selected dead runs", permissions=["operate"],
                  location=BOTH)
    def discard_dead(self, request, queryset):
        return self._after(request, queryset, confirm_then(
            self, request, queryset, verb="discard", done="discarded",
            explanation="The runs leave the dead letter as cancelled and are never run "
                        "again; their attempts and logs are kept.",
            apply=services.discard,
            describe=lambda run: error_summary(run.error, 120),
        ))


@admin.register(Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    list_display = ("id", "run_link", "number", "worker_id", "started", "finished",
                    "duration_display", "outcome", "error_line")
    list_filter = ("outcome", RunIdFilter, TimeRangeFilter.on("started_at", "started"))
    search_fields = ("=run__id", "worker_id", "error")
    search_help_text = "Run id, worker id, text of the error."
    list_select_related = ("run",)
    ordering = ("-id",)
    show_full_result_count = False
    readonly_fields = ("run_link", "duration_display", "error_pre", "log", "started",
                       "finished")
    fields = ("run_link", "number", "worker_id", ("started", "finished"),
              "duration_display", "outcome", "error_pre", "result", "log")
    started = timestamp_column("started_at", "started", precise=True)
    finished = timestamp_column("finished_at", "finished", precise=True)

    class Media:
        css = {"all": ["runs/admin.css"]}

    def get_queryset(self, request):
        return with_attempt_timing(super().get_queryset(request)).order_by("-id")

    @admin.display(description="run", ordering="run_id")
    def run_link(self, attempt):
        url = reverse("admin:runs_run_change", args=[attempt.run_id])
        return format_html('<a href="{}">{}</a>', url, attempt.run)

    @admin.display(description="duration", ordering="duration")
    def duration_display(self, attempt):
        return format_duration(attempt.duration)

    @admin.display(description="error")
    def error_line(self, attempt):
        return error_summary(attempt.error, 100) or "-"

    @admin.display(description="error")
    def error_pre(self, attempt):
        if not attempt.error:
            return "-"
        return format_html('<pre class="traceback">{}</pre>', attempt.error)

    @admin.display(description="log")
    def log(self, attempt):
        lines = list(attempt.log_lines.order_by("id")[:LOG_LINES_ON_RUN_PAGE])
        for line in lines:
            line.level_name = level_name(line.level)
        return render_to_string("admin/runs/log_lines.html", {"lines": lines})


@admin.register(LogLine)
class LogLineAdmin(ReadOnlyAdmin):
    """Log browsing across runs: search the text, filter by level (at least), time range,
    run and job."""

    list_display = ("time", "level_badge", "message_short", "logger", "run_link",
                    "attempt_number", "job_name")
    list_display_links = ("time",)
    list_filter = (LevelFilter, TimeRangeFilter.on("created_at", "time"),
                   type("RunFilter", (RunIdFilter,), {"lookup": "attempt__run_id"}),
                   type("JobFilter", (JobIdFilter,), {"lookup": "attempt__run__job_id"}))
    search_fields = ("message", "logger")
    search_help_text = "Words of the message or logger name (all must match; quote a phrase)."
    list_select_related = ("attempt__run__job",)
    ordering = ("-id",)
    show_full_result_count = False
    list_per_page = 100
    readonly_fields = ("time", "run_link", "attempt_number", "level_badge", "message_pre")
    fields = ("time", "level_badge", "logger", "run_link", "attempt_number", "message_pre")
    time = timestamp_column("created_at", "time", precise=True)

    class Media:
        css = {"all": ["runs/admin.css"]}

    @admin.display(description="level", ordering="level")
    def level_badge(self, line):
        name = level_name(line.level)
        return format_html('<span class="log-level log-{}">{}</span>', name.lower(), name)

    @admin.display(description="message")
    def message_short(self, line):
        text = line.message
        return text if len(text) <= 200 else text[:199] + "…"

    @admin.display(description="message")
    def message_pre(self, line):
        return format_html("<pre>{}</pre>", line.message)

    @admin.display(description="run", ordering="attempt__run_id")
    def run_link(self, line):
        url = reverse("admin:runs_run_change", args=[line.attempt.run_id])
        return format_html('<a href="{}">run {}</a>', url, line.attempt.run_id)

    @admin.display(description="attempt", ordering="attempt__number")
    def attempt_number(self, line):
        return line.attempt.number

    @admin.display(description="job")
    def job_name(self, line):
        return line.attempt.run.job.name


@admin.register(WorkerProcess)
class WorkerProcessAdmin(ReadOnlyAdmin):
    """Every worker that registered, live or not; the dashboard shows the live ones."""

    list_display = ("worker_id", "hostname", "pid", "queues", "concurrency", "started",
                    "last_heartbeat", "status", "running")
    list_filter = (TimeRangeFilter.on("last_heartbeat_at", "last heartbeat"),)
    search_fields = ("worker_id", "hostname")
    ordering = ("-last_heartbeat_at",)
    started = timestamp_column("started_at", "started")
    last_heartbeat = timestamp_column("last_heartbeat_at", "last heartbeat")

    def get_queryset(self, request):
        running = (Run.objects.filter(state=RunState.RUNNING, worker_id=OuterRef("worker_id"))
                   .order_by().values("worker_id").annotate(n=Count("pk")).values("n"))
        # The same rule as runs/stats.py live_workers(): heartbeat within 3 intervals.
        since = db_now() - timedelta(seconds=3 * conf.heartbeat_interval())
        return super().get_queryset(request).annotate(
            running_count=Coalesce(Subquery(running), 0),
            is_live=ExpressionWrapper(Q(last_heartbeat_at__gte=since, stopped_at__isnull=True),
                                      output_field=BooleanField()),
        )

    @admin.display(description="status")
    def status(self, worker):
        if worker.stopped_at:
            return "stopped"
        return "live" if worker.is_live else "silent (no heartbeat)"

    @admin.display(description="running", ordering="running_count")
    def running(self, worker):
        return worker.running_count

from runs.alerts import admin as alerts_admin  # noqa: E402, F401  (registers its models)
