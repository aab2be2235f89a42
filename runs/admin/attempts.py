"""The attempts, log lines and workers pages of the admin console (docs/admin.md),
read-only like the runs; runs/admin/run_admin.py registers them by importing this module."""

from datetime import timedelta

from django.contrib import admin
from django.db.models import (
    BooleanField,
    Count,
    ExpressionWrapper,
    OuterRef,
    Q,
    Subquery,
)
from django.db.models.functions import Coalesce
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.html import format_html

from runs.admin.helpers import (
    LOG_LINES_ON_RUN_PAGE,
    JobIdFilter,
    LevelFilter,
    ReadOnlyAdmin,
    RunIdFilter,
    TimeRangeFilter,
    error_summary,
    format_duration,
    level_name,
    timestamp_column,
    with_attempt_timing,
)
from runs.admin.paginator import EstimatedCountPaginator
from runs.clock import db_now
from runs.models import Attempt, LogLine, Run, RunState, WorkerProcess
from scheduler_core import conf


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
    paginator = EstimatedCountPaginator  # no COUNT(*) of the history (its module)
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
    paginator = EstimatedCountPaginator  # no COUNT(*) of the history (its module)
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
        # The same rule as runs/metrics/stats.py live_workers(): heartbeat within 3 intervals.
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
