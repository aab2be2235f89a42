"""The seed REST API: jobs (create, list, retrieve, runs, pause, resume) and health probes.

An owner sees only their own jobs (any other id answers 404); staff see all.
"""

from django.db import DatabaseError
from django.http import JsonResponse
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.pagination import CursorPagination, PageNumberPagination
from rest_framework.response import Response

from jobs import services
from jobs.exceptions import BrokerUnavailable, InvalidJob, SchedulerError
from jobs.models import Job
from jobs.serializers import (
    JobCreateSerializer,
    JobSerializer,
    RunSerializer,
    invalid_job_errors,
)
from runs.brokers import get_broker
from runs.models import Run


class JobPagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


class RunCursor(CursorPagination):
    page_size = 50
    ordering = "-scheduled_at"


class JobViewSet(mixins.CreateModelMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin,
                 viewsets.GenericViewSet):
    serializer_class = JobSerializer
    pagination_class = JobPagination

    def get_queryset(self):
        jobs = Job.objects.select_related("schedule", "owner").order_by("-id")
        user = self.request.user
        return jobs if user.is_staff else jobs.filter(owner=user)

    def create(self, request, *args, **kwargs):
        incoming = JobCreateSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        try:
            job = services.create_jobs([incoming.to_spec()], owner=request.user)[0]
        except InvalidJob as exc:
            if isinstance(exc, services.InvalidJobs):
                exc = InvalidJob(exc.item_errors[0])
            return Response(invalid_job_errors(exc), status=status.HTTP_400_BAD_REQUEST)
        job = self.get_queryset().get(pk=job.pk)
        return Response(JobSerializer(job).data, status=status.HTTP_201_CREATED)

    @action(detail=True, methods=["get"])
    def runs(self, request, pk=None):
        job = self.get_object()
        runs = Run.objects.filter(job=job).prefetch_related("attempts")
        paginator = RunCursor()
        page = paginator.paginate_queryset(runs, request, view=self)
        return paginator.get_paginated_response(RunSerializer(page, many=True).data)

    @action(detail=True, methods=["post"])
    def pause(self, request, pk=None):
        job = self.get_object()
        services.pause([job.pk])
        return Response(JobSerializer(self.get_queryset().get(pk=job.pk)).data)

    @action(detail=True, methods=["post"])
    def resume(self, request, pk=None):
        job = self.get_object()
        services.resume([job.pk])
        return Response(JobSerializer(self.get_queryset().get(pk=job.pk)).data)


def healthz(request):
    """The process is up."""
    return JsonResponse({"status": "ok"})


def readyz(request):
    """The database and the broker are reachable; 503 naming the one that is not."""
    problems = {}
    try:
        Job.objects.exists()
    except DatabaseError as exc:
        problems["database"] = str(exc).strip()[:200]
    try:
        get_broker().ping()
    except (BrokerUnavailable, SchedulerError, DatabaseError) as exc:
        problems["broker"] = str(exc).strip()[:200]
    if problems:
        return JsonResponse({"status": "unavailable", **problems}, status=503)
    return JsonResponse({"status": "ok", "broker": get_broker().name})
