"""The jobs REST API (/api/jobs/...) and the health probes (/healthz, /readyz).

An owner sees and acts on their own jobs only: any other owner's job answers 404 on every
verb, exactly like a job that does not exist, unless Django's model permissions allow more
(scheduler_core/rest/permissions.py: view_job to see, change_job to act; is_staff alone
grants nothing). Every write goes through jobs/services.py, the same functions the Python API and
the admin use; a write to a workflow node's job is refused there, 409 naming the workflow
(jobs/guards.py).
"""

import logging

from django.db import DatabaseError
from django.http import JsonResponse
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    extend_schema,
    extend_schema_view,
)
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response

from jobs import node_job_lists, services, spec, tenants
from jobs.api.bulk_serializers import (
    BulkCreatedSerializer,
    BulkErrorSerializer,
    BulkJobsSerializer,
    FastItemParser,
)
from jobs.api.filters import JOB_ORDERING, JobFilter
from jobs.api.idempotency import HEADER as IDEMPOTENCY_HEADER
from jobs.api.idempotency import idempotent
from jobs.api.old_names import deprecation_headers
from jobs.api.serializers import (
    CreatedJobSerializer,
    JobCreateSerializer,
    JobSerializer,
    JobUpdateSerializer,
    StrictFieldsMixin,
    api_errors,
    to_spec,
)
from jobs.guards import ManagedJob
from jobs.lifecycle import with_shown_status
from jobs.models import Job
from jobs.schedules.pausing import CATCH_UP
from jobs.tenants import QuotaExceeded
from runs.api.serializers import RunSerializer
from runs.brokers import get_broker
from scheduler_core import conf
from scheduler_core.exceptions import BrokerUnavailable, InvalidJob, SchedulerError
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
from scheduler_core.rest.permissions import OwnerOrModelPermission, may_view_all
from scheduler_core.rest.query_params import KnownParameters
from scheduler_core.rest.throttling import IsAuthenticatedOrThrottled
from scheduler_core.rest.view_defaults import ApiPolicy

log = logging.getLogger("scheduler.health")


class ResumeSerializer(StrictFieldsMixin, serializers.Serializer):
    """The optional body of POST /api/jobs/{id}/resume/ (rules in docs/cron.md, "Pause and
    resume")."""

    catch_up = serializers.ChoiceField(
        choices=CATCH_UP, default="skip",
        help_text="which runs scheduled while the job was paused run: skip (none, the "
                  "default; held runs end cancelled, with why), latest (the latest one) or "
                  "all (each), both within the schedule's max_lag_s")


IDEMPOTENCY = OpenApiParameter(
    IDEMPOTENCY_HEADER, OpenApiTypes.STR, OpenApiParameter.HEADER, required=False,
    description="retrying a POST with the same key returns the first response (with "
                "header Idempotent-Replayed: true) instead of creating a second job; 1-255 "
                "printable ASCII characters, kept IDEMPOTENCY_TTL_S (24 h)")


class JobPagination(PageNumberPagination):
    """Page-number pagination for jobs: ``page`` (1-based), ``page_size`` (default 50,
    at most 500)."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


@extend_schema_view(
    list=extend_schema(summary="List your jobs", responses={200: JobSerializer(many=True),
                                                           **LISTED}),
    retrieve=extend_schema(summary="One job", responses={200: JobSerializer, **COMMON}),
    create=extend_schema(
        summary="Create a job (one-off with run_at, or recurring with a cron schedule)",
        request=JobCreateSerializer, parameters=[IDEMPOTENCY],
        responses={201: CreatedJobSerializer, 200: CreatedJobSerializer, 400: FIELD_ERRORS,
                   413: DetailSerializer, 422: DetailSerializer, **COMMON},
        examples=[OpenApiExample("recurring", request_only=True, value={
            "name": "nightly report", "handler": "echo", "cron": "30 2 * * *",
            "timezone": "Europe/Berlin", "payload": {"report": "sales"}}),
            OpenApiExample("one-off", request_only=True, value={
                "handler": "noop", "run_at": "2030-01-01T09:00:00+01:00"})]),
    partial_update=extend_schema(
        summary="Change a job's payload, schedule, priority or limits",
        request=JobUpdateSerializer,
        responses={200: JobSerializer, 400: FIELD_ERRORS, 409: DetailSerializer, **COMMON}),
    destroy=extend_schema(
        summary="Cancel a job and its pending runs (the job is kept, status cancelled)",
        responses={200: JobSerializer, 409: DetailSerializer, **COMMON}),
)
class JobViewSet(ApiPolicy, ReplicaList, mixins.CreateModelMixin, mixins.ListModelMixin,
                 mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """/api/jobs/: list, create, retrieve, partial update, cancel (DELETE), pause, resume,
    trigger, bulk. A run list per job is at /api/jobs/{id}/runs/ (runs/api/views.py)."""

    serializer_class = JobSerializer
    pagination_class = JobPagination
    filter_backends = [KnownParameters, DjangoFilterBackend, StrictOrderingFilter]
    filterset_class = JobFilter
    ordering_fields = JOB_ORDERING
    ordering = ["-id"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    lookup_value_regex = r"\d+"
    permission_classes = [IsAuthenticatedOrThrottled, OwnerOrModelPermission]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user
            return Job.objects.none()
        jobs = node_job_lists.with_workflow(
            with_shown_status(Job.objects.select_related("schedule", "owner")))
        user = self.request.user
        return jobs if may_view_all(user, Job) else jobs.filter(owner=user)

    def filter_queryset(self, queryset):
        jobs = super().filter_queryset(queryset)
        # The plain list leaves workflows' node jobs out unless asked (jobs/api/filters.py);
        # one of them is still found by id.
        asked = {"nodes", "workflow"} & set(self.request.query_params)
        return node_job_lists.plain(jobs) if self.action == "list" and not asked else jobs

    def get_serializer_class(self):
        return {"create": JobCreateSerializer, "partial_update": JobUpdateSerializer,
                "bulk": BulkJobsSerializer}.get(self.action, JobSerializer)

    @property
    def max_body_setting(self) -> str:
        """The body-size tunable scheduler_core/rest/parsers.py applies to this request."""
        return "API_BULK_MAX_BODY_BYTES" if self.action == "bulk" else "API_MAX_BODY_BYTES"

    def create(self, request, *args, **kwargs):
        return idempotent(request, lambda: self._create(request))

    def _create(self, request) -> Response:
        incoming = JobCreateSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        old_names = getattr(incoming, "deprecated_used", ())
        try:
            job = services.create_jobs([to_spec(incoming.validated_data)],
                                       owner=request.user)[0]
        except services.InvalidJobs as exc:
            raise ValidationError(api_errors(exc.item_errors[0], old_names)) from exc
        except QuotaExceeded as exc:
            raise QuotaRefused(exc) from exc
        # A unique key an earlier job holds answers that job, flagged, as Oban does
        # (jobs/ingest/unique.py; docs/api.md, "Unique jobs").
        return Response({**JobSerializer(job).data, "conflict": job.conflict},
                        status=status.HTTP_200_OK if job.conflict else status.HTTP_201_CREATED,
                        headers={"Location": f"/api/jobs/{job.pk}/",
                                 **deprecation_headers(old_names)})

    def partial_update(self, request, *args, **kwargs):
        job = self.get_object()
        incoming = JobUpdateSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        old_names = getattr(incoming, "deprecated_used", ())
        try:
            services.update_job(job.pk, incoming.to_changes())
        except InvalidJob as exc:
            raise ValidationError(api_errors(exc.errors, old_names)) from exc
        except SchedulerError as exc:
            raise Conflict(str(exc)) from exc
        return Response(JobSerializer(self.get_queryset().get(pk=job.pk)).data,
                        headers=deprecation_headers(old_names))

    def destroy(self, request, *args, **kwargs):
        job = self.get_object()
        try:
            services.cancel([job.pk])
        except ManagedJob as exc:
            raise Conflict(str(exc)) from exc
        return Response(JobSerializer(self.get_queryset().get(pk=job.pk)).data)

    @extend_schema(summary="Pause a job: no new runs; pending runs are held",
                   request=None, responses={200: JobSerializer, 409: DetailSerializer, **COMMON})
    @action(detail=True, methods=["post"])
    def pause(self, request, pk=None):
        job = self._not_cancelled("paused")
        try:
            services.pause([job.pk])
        except ManagedJob as exc:
            raise Conflict(str(exc)) from exc
        return Response(JobSerializer(self.get_queryset().get(pk=job.pk)).data)

    @extend_schema(summary="Resume a paused job; what was scheduled while paused runs only "
                           "as catch_up says (default: nothing)",
                   request=ResumeSerializer,
                   responses={200: JobSerializer, 400: FIELD_ERRORS, 409: DetailSerializer,
                              **COMMON})
    @action(detail=True, methods=["post"])
    def resume(self, request, pk=None):
        job = self._not_cancelled("resumed")
        # No ``or {}``: a body of [], null or false is a 400, not the default catch_up;
        # an empty body is an empty object already.
        incoming = ResumeSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        try:
            services.resume([job.pk], catch_up=incoming.validated_data["catch_up"])
        except InvalidJob as exc:  # a stored schedule that no longer reads: edit it
            raise ValidationError(api_errors(exc.errors)) from exc
        except QuotaExceeded as exc:  # the catch-up runs count (docs/cron.md)
            raise QuotaRefused(exc) from exc
        except ManagedJob as exc:
            raise Conflict(str(exc)) from exc
        return Response(JobSerializer(self.get_queryset().get(pk=job.pk)).data)

    @extend_schema(summary="Create one extra run of an active job now",
                   request=None, responses={201: RunSerializer, 409: DetailSerializer, **COMMON})
    @action(detail=True, methods=["post"])
    def trigger(self, request, pk=None):
        job = self.get_object()
        try:
            run = services.trigger(job.pk)
        except QuotaExceeded as exc:
            raise QuotaRefused(exc) from exc
        except SchedulerError as exc:
            raise Conflict(str(exc)) from exc
        return Response(RunSerializer(run).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Create up to 10,000 jobs in one request, all or nothing",
        request=BulkJobsSerializer, parameters=[IDEMPOTENCY],
        responses={201: BulkCreatedSerializer, 400: BulkErrorSerializer,
                   413: DetailSerializer, 422: DetailSerializer, **COMMON})
    @action(detail=False, methods=["post"])
    def bulk(self, request):
        return idempotent(request, lambda: self._bulk(request))

    def _bulk(self, request) -> Response:
        items = _bulk_items(request.data)
        child, fast = JobCreateSerializer(), FastItemParser()
        specs, positions, errors = [], [], {}
        for i, item in enumerate(items):
            try:
                data = fast.parse(item)
                if data is None:
                    data = child.run_validation(item)
                specs.append(to_spec(data))
                positions.append(i)
            except ValidationError as exc:
                errors[i] = exc.detail
        try:
            if errors:  # report every bad item, but store nothing
                services.validate_specs(specs, tenants.bounds_of(request.user.pk))
            else:
                jobs = services.create_jobs(specs, owner=request.user)
        except services.InvalidJobs as exc:
            for j, item_errors in exc.item_errors.items():
                # Each item's errors name its fields as it sent them: one item's old
                # max_retries must not rename another's max_attempts.
                item = items[positions[j]]
                sent_old = [key for key in item if spec.renamed(key, spec.REST)] \
                    if isinstance(item, dict) else []
                errors.setdefault(positions[j], {}).update(api_errors(item_errors, sent_old))
        except QuotaExceeded as exc:
            raise QuotaRefused(exc) from exc
        if errors:
            return Response({
                "detail": f"{len(errors)} of {len(items)} jobs are invalid; nothing was stored",
                "errors": [{"index": i, "errors": errors[i]} for i in sorted(errors)],
            }, status=status.HTTP_400_BAD_REQUEST)
        # ids and conflicts, not the jobs: no Job instance is made (jobs/ingest/bulk.py).
        return Response({"count": len(jobs) - len(jobs.conflicts), "ids": jobs.ids,
                         "conflicts": jobs.conflicts}, status=status.HTTP_201_CREATED,
                        headers=deprecation_headers(getattr(child, "deprecated_used", ())))

    def _not_cancelled(self, verb: str) -> Job:
        job = self.get_object()
        if job.status == Job.Status.CANCELLED:
            raise Conflict(f"job {job.pk} is cancelled; it cannot be {verb}")
        return job


class BulkRefused(APIException):
    """The bulk request as a whole is wrong (400), in the bulk error shape."""

    status_code = status.HTTP_400_BAD_REQUEST
    default_code = "invalid"

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = {"detail": detail, "errors": []}


def _bulk_items(data) -> list:
    """The ``jobs`` list of a bulk request; raises BulkRefused naming what is wrong."""
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list):
        raise BulkRefused('give {"jobs": [job, ...]}, a list of jobs')
    unknown = sorted(set(data) - {"jobs"})
    if unknown:
        raise BulkRefused(f"unknown field(s): {', '.join(unknown)}; give only jobs")
    items, cap = data["jobs"], conf.get("API_BULK_MAX_JOBS")
    if not items:
        raise BulkRefused("give at least one job")
    if len(items) > cap:
        raise BulkRefused(f"at most {cap} jobs per request; got {len(items)}")
    return items


def healthz(request):
    """The process is up."""
    return JsonResponse({"status": "ok"})


def readyz(request):
    """The database and the broker are reachable; 503 naming the one that is not. The
    answer (anyone may ask) says which is down, never where it lives: the error, which
    names hosts and ports, goes to the server's log (docs/security.md)."""
    problems = {}
    try:
        Job.objects.exists()
    except DatabaseError as exc:
        problems["database"] = exc
    try:
        get_broker().ping()
    except (BrokerUnavailable, SchedulerError, DatabaseError) as exc:
        problems["broker"] = exc
    if problems:
        for name, exc in problems.items():
            log.warning("readyz: the %s is unavailable: %s", name, str(exc).strip()[:500])
        return JsonResponse({"status": "unavailable", **{
            name: "unavailable (the reason is in the server's log)" for name in problems}},
            status=503)
    return JsonResponse({"status": "ok", "broker": get_broker().name})

