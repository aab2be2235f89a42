"""The runs REST API: /api/runs/ (with attempts, logs, retry, cancel), the runs of one job
(/api/jobs/{id}/runs/), /api/dead-letter/ and /api/queues/.

Runs belong to jobs, so an owner sees the runs of their own jobs only; any other run id
answers 404 on every verb, unless Django's model permissions allow more
(scheduler_core/rest/permissions.py: view_run to see, change_run to retry or cancel;
is_staff alone grants nothing). Runs grow without bound, so their lists use cursor
pagination (stable under inserts, no COUNT). Every change goes through runs/services.py,
the functions the admin uses too. The views are the runs app's own; what every app's API
builds on is scheduler_core/rest/ (docs/architecture.md, "Code layout and dependency
rule").
"""

from django.db import DEFAULT_DB_ALIAS
from django.shortcuts import get_object_or_404
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs.models import Job
from runs import services
from runs.api import dead_letter
from runs.api.filters import DeadLetterFilter, LogLineFilter, RunFilter
from runs.api.serializers import (
    DeadRunSerializer,
    LogLineSerializer,
    QueueStatsSerializer,
    RunSerializer,
)
from runs.metrics.stats import queue_stats
from runs.models import PENDING_STATES, LogLine, Run, RunState
from runs.tenancy.quotas import QuotaExceeded, bounds_of
from scheduler_core.exceptions import BrokerUnavailable
from scheduler_core.replicas import ReplicaList
from scheduler_core.rest.errors import (
    COMMON,
    FIELD_ERRORS,
    LISTED,
    Conflict,
    DetailSerializer,
    QuotaRefused,
)
from scheduler_core.rest.ordering import StrictOrderingFilter
from scheduler_core.rest.owner_lists import CheckedCursor
from scheduler_core.rest.permissions import OwnerOrModelPermission, may_change_all, may_view_all
from scheduler_core.rest.query_params import KnownParameters
from scheduler_core.rest.strict_fields import StrictFields
from scheduler_core.rest.throttling import IsAuthenticatedOrThrottled
from scheduler_core.rest.view_defaults import ApiPolicy

RUN_ORDERING = ("scheduled_at", "created_at", "id")


class RunCursor(CheckedCursor):
    """Newest scheduled first by default; ``ordering`` may name a RUN_ORDERING field."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500
    ordering = ("-scheduled_at", "-id")


class LogCursor(CheckedCursor):
    """Log lines in the order they were written."""

    page_size = 200
    page_size_query_param = "page_size"
    max_page_size = 1000
    ordering = ("id",)


class DeadCursor(CheckedCursor):
    """Most recently dead first."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500
    ordering = ("-finished_at", "-id")


def visible_runs(request):
    """The runs ``request.user`` may see: their jobs' runs, or all with the view_run (or
    change_run) permission."""
    runs = Run.objects.all()
    return runs if may_view_all(request.user, Run) else runs.filter(job__owner=request.user)


# Above this many jobs the per-job merge of scheduler_core/rest/owner_lists.py costs more
# than the walk it avoids (one index descent per job and partition); such an owner's runs
# are a large share anyway.
OWNER_JOBS_MAX = 100


def owner_job_ids(user) -> list[int] | None:
    """The ids of ``user``'s jobs if there are at most OWNER_JOBS_MAX, else None."""
    ids = list(Job.objects.filter(owner=user).order_by().values_list("pk", flat=True)
               [:OWNER_JOBS_MAX + 1])
    return ids if len(ids) <= OWNER_JOBS_MAX else None


def owner_jobs(view) -> list[int] | None:
    """For a list of one owner's runs (no view_run permission, not one job's list): the
    owner's job ids if at most OWNER_JOBS_MAX, else None."""
    if "job_pk" in view.kwargs or may_view_all(view.request.user, Run):
        return None
    return owner_job_ids(view.request.user)


def visible_job(request, job_pk) -> Job:
    """The job ``job_pk`` if ``request.user`` may see it (their own, or any with the
    view_job or change_job permission); raises Http404 otherwise. Read from the primary,
    also in a list read from a replica: a job made a moment ago has a list, if empty."""
    jobs = Job.objects.using(DEFAULT_DB_ALIAS)
    if not may_view_all(request.user, Job):
        jobs = jobs.filter(owner=request.user)
    return get_object_or_404(jobs, pk=job_pk)


@extend_schema_view(
    list=extend_schema(summary="List runs (filter by job, state, queue, time ranges)",
                       responses={200: RunSerializer(many=True), **LISTED}),
    retrieve=extend_schema(summary="One run with its attempts",
                           responses={200: RunSerializer, **COMMON}),
)
class RunViewSet(ApiPolicy, ReplicaList, mixins.ListModelMixin, mixins.RetrieveModelMixin,
                 viewsets.GenericViewSet):
    """/api/runs/ and /api/jobs/{job_pk}/runs/: runs with their attempts; retry and cancel
    one run."""

    serializer_class = RunSerializer
    pagination_class = RunCursor
    filter_backends = [KnownParameters, DjangoFilterBackend, StrictOrderingFilter]
    filterset_class = RunFilter
    ordering_fields = RUN_ORDERING
    lookup_value_regex = r"\d+"
    permission_classes = [IsAuthenticatedOrThrottled, OwnerOrModelPermission]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user
            return Run.objects.none()
        runs = visible_runs(self.request).select_related("job").prefetch_related("attempts")
        if "job_pk" in self.kwargs:
            runs = runs.filter(job=visible_job(self.request, self.kwargs["job_pk"]))
        return runs

    def owner_job_ids(self) -> list[int] | None:
        """The jobs the listed runs all belong to, when few (scheduler_core/rest/owner_lists.py)."""
        return owner_jobs(self)

    @extend_schema(summary="Requeue a dead (or cancelled) run now with a fresh attempt budget",
                   request=None, responses={200: RunSerializer, 409: DetailSerializer, **COMMON})
    @action(detail=True, methods=["post"])
    def retry(self, request, pk=None):
        run = self.get_object()
        try:
            requeued = services.requeue([run.pk], strict=True)
        except QuotaExceeded as exc:
            raise QuotaRefused(exc) from exc
        if not requeued:
            # Read again: the run may have changed, or been pruned, since get_object.
            run = Run.objects.select_related("job").filter(pk=run.pk).first()
            if run is None:
                raise NotFound(f"run {pk} no longer exists (its history was pruned, "
                               "docs/retention.md)")
            if run.state not in services.REQUEUEABLE:
                raise Conflict(f"run {run.pk} is {run.state}; only dead or cancelled runs "
                               "can be retried")
            if run.job.status == Job.Status.CANCELLED:
                # A cancelled job is not resumed (a workflow's node job: its workflow was
                # cancelled, docs/workflows.md, "Cancel and pause").
                raise Conflict(f"run {run.pk}'s job is cancelled: its runs cannot run again")
            raise Conflict(f"run {run.pk}'s job is {run.job.status}; resume the job first")
        return Response(RunSerializer(self.get_queryset().get(pk=run.pk)).data)

    @extend_schema(summary="Cancel a pending or running run (a running handler is stopped: "
                           "signalled, then killed after CANCEL_GRACE_S)",
                   request=None, responses={200: RunSerializer, 409: DetailSerializer, **COMMON})
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        run = self.get_object()
        if not services.cancel([run.pk]):
            allowed = ", ".join([*PENDING_STATES, RunState.RUNNING])
            raise Conflict(f"run {run.pk} is {run.state}; only {allowed} runs can be cancelled")
        return Response(RunSerializer(self.get_queryset().get(pk=run.pk)).data)


@extend_schema_view(list=extend_schema(
    summary="The log lines of a run's attempts (filter by level, text, attempt)",
    responses={200: LogLineSerializer(many=True), **LISTED}))
class LogLineViewSet(ApiPolicy, ReplicaList, mixins.ListModelMixin, viewsets.GenericViewSet):
    """/api/runs/{run_pk}/logs/: every attempt's log lines, oldest first."""

    serializer_class = LogLineSerializer
    pagination_class = LogCursor
    filter_backends = [KnownParameters, DjangoFilterBackend]
    filterset_class = LogLineFilter

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return LogLine.objects.none()
        # The run from the primary (as visible_job), its lines from the replica if fresh.
        run = get_object_or_404(visible_runs(self.request).using(DEFAULT_DB_ALIAS),
                                pk=self.kwargs["run_pk"])
        return LogLine.objects.filter(attempt__run=run).select_related("attempt")


class DeadLetterBulkSerializer(StrictFields, serializers.Serializer):
    """POST /api/dead-letter/requeue/ and /discard/: which dead runs (every field
    optional; none given: the whole dead letter you may change), and whether only to
    count them."""

    queue = serializers.CharField(required=False, max_length=64)
    job = serializers.IntegerField(required=False, min_value=1, help_text="a job id")
    handler = serializers.CharField(required=False, max_length=200)
    owner = serializers.CharField(required=False, max_length=150,
                                  help_text="the username owning the runs' jobs")
    older_than_s = serializers.FloatField(
        required=False, min_value=0, max_value=1e9,
        help_text="only runs dead for more than this many seconds")
    dry_run = serializers.BooleanField(required=False, default=False,
                                       help_text="count the runs; change nothing")


class DeadLetterBulkResultSerializer(serializers.Serializer):
    """What a bulk requeue or discard did: the dead runs the filter picked, and how many
    were requeued (or discarded); 0 on a dry run."""

    matched = serializers.IntegerField()
    requeued = serializers.IntegerField(required=False)
    discarded = serializers.IntegerField(required=False)
    dry_run = serializers.BooleanField()


@extend_schema_view(
    list=extend_schema(summary="Dead runs with the reason each died",
                       responses={200: DeadRunSerializer(many=True), **LISTED}),
    retrieve=extend_schema(summary="One dead run",
                           responses={200: DeadRunSerializer, **COMMON}),
)
class DeadLetterViewSet(ApiPolicy, ReplicaList, mixins.ListModelMixin, mixins.RetrieveModelMixin,
                        viewsets.GenericViewSet):
    """/api/dead-letter/: runs whose attempts are exhausted. Retry one with
    POST /api/runs/{id}/retry/; requeue or discard many by filter with
    POST /api/dead-letter/requeue/ and /discard/ (runs/api/dead_letter.py)."""

    serializer_class = DeadRunSerializer
    pagination_class = DeadCursor
    filter_backends = [KnownParameters, DjangoFilterBackend]
    filterset_class = DeadLetterFilter
    lookup_value_regex = r"\d+"

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Run.objects.none()
        return (visible_runs(self.request).dead().select_related("job")
                .prefetch_related("attempts"))

    def owner_job_ids(self) -> list[int] | None:
        """The jobs the listed runs all belong to, when few (scheduler_core/rest/owner_lists.py)."""
        return owner_jobs(self)

    @extend_schema(summary="Requeue the dead runs a filter picks, with a fresh attempt budget",
                   request=DeadLetterBulkSerializer,
                   responses={200: DeadLetterBulkResultSerializer, 400: FIELD_ERRORS,
                              **COMMON})
    @action(detail=False, methods=["post"])
    def requeue(self, request):
        return self._bulk(request, "requeue")

    @extend_schema(summary="Discard the dead runs a filter picks (they become cancelled)",
                   request=DeadLetterBulkSerializer,
                   responses={200: DeadLetterBulkResultSerializer, 400: FIELD_ERRORS,
                              **COMMON})
    @action(detail=False, methods=["post"])
    def discard(self, request):
        return self._bulk(request, "discard")

    def _bulk(self, request, verb: str) -> Response:
        """Apply ``verb`` to the dead runs the body's filter picks among those the user
        may change: their own, or every owner's with runs.change_run."""
        # No ``or {}``: a body of [], null or false is a 400, not "no filter" (which is
        # the whole dead letter); an empty body is an empty filter already.
        incoming = DeadLetterBulkSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = dict(incoming.validated_data)
        dry_run = data.pop("dry_run")
        runs = Run.objects.all()
        if not may_change_all(request.user, Run):
            runs = runs.filter(job__owner=request.user)
        picked = dead_letter.DeadFilter(**data).select(runs)
        if dry_run:
            matched, changed = picked.count(), 0
        else:
            matched, changed = dead_letter.apply(verb, picked)
        return Response({"matched": matched, dead_letter.DONE[verb]: changed,
                         "dry_run": dry_run})


class QueueView(ApiPolicy, APIView):
    """/api/queues/: per queue and per shard, ready / delayed / leased depth in the broker,
    the age of the oldest ready run, throughput and lag over the last 60 s, and live
    workers with their slots (docs/scaling.md). The figures are the whole queue's (queues
    are shared); a user without the view_run permission sees only the queues it may use:
    "default", its default queue and the queues its policy gives it (docs/isolation.md)."""

    @extend_schema(summary="Depth, oldest ready age, throughput, lag and workers per queue "
                           "and shard",
                   responses={200: QueueStatsSerializer(many=True), 503: DetailSerializer,
                              **COMMON})
    def get(self, request):
        try:
            stats = queue_stats()
        except BrokerUnavailable as exc:
            # Depth is the point of this endpoint; without the broker, say so plainly.
            return Response({"detail": str(exc)}, status=503)
        if not may_view_all(request.user, Run):
            allowed = bounds_of(request.user.pk).queues
            stats = [s for s in stats if s.queue in allowed]
        return Response(QueueStatsSerializer([s.as_dict() for s in stats], many=True).data)
