"""The runs side of the admin console (docs/admin.md).

Runs, attempts, log lines and workers are read-only here: no add, change or delete. Only
actions change runs, and each action calls the same service function as the REST API
(runs/services.py), never ``save()`` on a run (docs/architecture.md, "Conventions in the
code"). Actions need the ``runs.change_run`` permission (superusers have it);
irreversible ones go through a confirmation page.
"""

import json

from django.contrib import admin
from django.contrib.admin.options import ActionLocation
from django.db.models import (
    OuterRef,
    Subquery,
)
from django.http import HttpResponseRedirect
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from runs import services
from runs.admin.attempts import AttemptAdmin  # noqa: F401 - registers attempts, logs, workers
from runs.admin.cells import cut
from runs.admin.helpers import (
    LOG_LINES_ON_RUN_PAGE,
    JobIdFilter,
    QueueFilter,
    ReadOnlyAdmin,
    TimeRangeFilter,
    confirm_then,
    error_summary,
    format_duration,
    level_name,
    timestamp_column,
    with_attempt_timing,
    with_timing,
)
from runs.admin.paginator import EstimatedCountPaginator
from runs.admin.rate_limits import RateLimitAdmin  # noqa: F401 - registers rate limits
from runs.alerts import admin as alerts_admin  # noqa: F401 - registers its models
from runs.execution import hooks
from runs.models import Attempt, DeadRun, LogLine, Run

BOTH = [ActionLocation.CHANGE_LIST, ActionLocation.CHANGE_FORM]


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
    paginator = EstimatedCountPaginator  # no COUNT(*) of the history (its module)
    list_per_page = 50
    actions = ["requeue_runs", "cancel_runs"]
    readonly_fields = ("job_link", "state_badge", "lag_display", "duration_display",
                       "attempts_display", "error_pre", "result_pre", "attempts_and_logs",
                       "scheduled", "started", "finished", "run_at_display",
                       "lease_expires", "created", "first_started", "last_started",
                       "lag_explained", "duration_explained", "catch_up_display",
                       "holds_up")
    fieldsets = [
        (None, {"fields": [("job_link", "state_badge"), ("queue", "shard", "priority"),
                           ("scheduled", "run_at_display", "jitter_s"),
                           ("attempts_display", "worker_id", "lease_expires"),
                           "created", "holds_up"]}),
        # Both starts, each labelled, beside the figure measured from it (docs/admin.md,
        # "Runs"): lag from the first attempt's start, duration from the last one's.
        ("Timing", {"fields": [("first_started", "lag_explained"),
                               ("last_started", "finished", "duration_explained"),
                               "catch_up_display"]}),
        ("Outcome", {"fields": ["error_pre", "result_pre"]}),
        ("Attempts and their logs", {"fields": ["attempts_and_logs"],
                                     "classes": ["attempts-and-logs"]}),
    ]

    class Media:
        css = {"all": ["runs/admin.css"]}

    scheduled = timestamp_column("scheduled_at", "scheduled")
    run_at_display = timestamp_column("run_at", "may start at")
    started = timestamp_column("started_at", "started")
    first_started = timestamp_column("first_started_at", "first attempt started")
    last_started = timestamp_column("started_at", "last attempt started")
    finished = timestamp_column("finished_at", "finished")
    lease_expires = timestamp_column("lease_expires_at", "lease expires")
    created = timestamp_column("created_at", "created")

    def get_queryset(self, request):
        return hooks.annotate_holders(with_timing(super().get_queryset(request)))

    @admin.display(description="holds up")
    def holds_up(self, run):
        """What waits for this run (a workflow run whose node it is; runs/execution/hooks.py)."""
        links = hooks.holders_of(run)
        if not links:
            return "-"
        return format_html_join(", ", '<a href="{}">{}</a>',
                                ((url, text) for text, url in links))

    @admin.display(description="job", ordering="job__name")
    def job_link(self, run):
        url = reverse("admin:jobs_job_change", args=[run.job_id])
        return format_html('<a href="{}">{}</a> <span class="quiet">#{}</span>', url,
                           cut(run.job.name, two_lines=True), run.job_id)

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

    @admin.display(description="lag (first attempt started − scheduled, or created if later)")
    def lag_explained(self, run):
        return format_duration(run.lag)

    @admin.display(description="duration (last attempt: finished − started)")
    def duration_explained(self, run):
        return format_duration(run.duration)

    @admin.display(description="catch-up run")
    def catch_up_display(self, run):
        if not run.catch_up:
            return "no"
        return ("yes: late on purpose, for an occurrence missed while the scheduler was "
                "down or held by a pause; not counted as lag")

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
                        "jobs are requeued, as many as their owner's pending-runs quota "
                        "(max_pending) leaves room for.",
            apply=services.requeue,
            skipped_reason=("only dead or cancelled runs of active jobs can be requeued, "
                            "within their owner's pending-runs quota (max_pending)"),
            describe=lambda run: run.state,
        )

    @admin.action(description="Cancel selected runs (pending or running)",
                  permissions=["operate"], location=BOTH)
    def cancel_runs(self, request, queryset):
        return confirm_then(
            self, request, queryset, verb="cancel", done="cancelled",
            explanation="Pending runs will not start. A running handler is stopped within "
                        "seconds (killed if it does not stop) and its attempt recorded "
                        "cancelled.",
            apply=services.cancel,
            skipped_reason="only pending or running runs can be cancelled",
            describe=lambda run: run.state,
        )


@admin.register(DeadRun)
class DeadRunAdmin(RunAdmin):
    """The dead letter: runs whose attempts are exhausted, with the reason each died;
    requeue (fresh attempt budget) or discard them in bulk, after a confirmation page."""

    action_noun = ("dead run", "dead runs")
    # The reason first after the job; the scheduled time and the queue are on the run
    # page (and the queue a filter), so the row fits a 1366 px window with the sidebar
    # open (docs/admin.md, "Screen width").
    list_display = ("id", "job_and_holder", "reason", "died_at", "attempts_display",
                    "last_outcome")
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

    @admin.display(description="job", ordering="job__name")
    def job_and_holder(self, run):
        # What the run holds up sits under its job, not in a column of its own: the row
        # must fit a 1366 px window (docs/admin.md, "Screen width").
        links = hooks.holders_of(run)
        if not links:
            return self.job_link(run)
        return format_html('{}<br><span class="quiet">holds up</span> {}', self.job_link(run),
                           self.holds_up(run))

    @admin.display(description="outcome", ordering="last_outcome")
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
                        "Runs of paused or cancelled jobs, and those over their owner's "
                        "pending-runs quota (max_pending), are left in the dead letter.",
            apply=services.requeue,
            skipped_reason=("their job is paused or cancelled (resume it first), or their "
                            "owner's pending-runs quota (max_pending) is reached"),
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
