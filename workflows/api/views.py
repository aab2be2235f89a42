"""The workflows REST API (docs/api.md, "Workflows"): /api/workflows/ (create, list, get,
pause, resume, trigger; a workflow's runs at /api/workflows/{id}/runs/) and
/api/workflow-runs/ (list, get with every node, cancel, pause, resume).

Owner isolation is the jobs' (scheduler_core/rest/permissions.py): an owner sees and acts on their
own workflows and their runs only, and any other owner's id answers 404 on every verb, like
an id that does not exist, unless Django's model permissions allow more
(``workflows.view_workflow`` / ``view_workflowrun`` to see, ``change_workflow`` /
``change_workflowrun`` to act); ``is_staff`` grants nothing. The same login, throttles
and body cap as every endpoint under /api/ apply. Every change goes through
workflows/services.py and workflows/control.py, which the Python API and the admin use.
"""

import django_filters as filters
from django.shortcuts import get_object_or_404
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from jobs.api.idempotency import idempotent
from jobs.api.jobs import IDEMPOTENCY, JobPagination
from jobs.api.serializers import api_errors
from jobs.tenants import QuotaExceeded
from scheduler_core.exceptions import InvalidJob, SchedulerError
from scheduler_core.replicas import ReplicaList
from scheduler_core.rest.errors import (
    COMMON,
    FIELD_ERRORS,
    LISTED,
    Conflict,
    DetailSerializer,
    QuotaRefused,
)
from scheduler_core.rest.owner_lists import CheckedCursor
from scheduler_core.rest.permissions import OwnerOrModelPermission, may_view_all
from scheduler_core.rest.query_params import KnownParameters
from scheduler_core.rest.throttling import IsAuthenticatedOrThrottled
from scheduler_core.rest.view_defaults import ApiPolicy
from workflows import control, services
from workflows.api.serializers import (
    StartSerializer,
    WorkflowCreateSerializer,
    WorkflowRunDetailSerializer,
    WorkflowRunSerializer,
    WorkflowSerializer,
    WorkflowSummarySerializer,
)
from workflows.models import Workflow, WorkflowRun, WorkflowRunState

EXAMPLE = {"name": "nightly etl", "schedule": {"cron": "0 2 * * *", "timezone": "Europe/Berlin"},
           "nodes": [{"name": "extract", "handler": "echo", "payload": {"table": "sales"}},
                     {"name": "clean", "handler": "echo"},
                     {"name": "report", "handler": "echo", "max_attempts": 3}],
           "edges": [["extract", "clean"], ["clean", "report"]]}


def owner_of(obj) -> int | None:
    """The id of the user owning a Workflow or a WorkflowRun (its workflow's owner)."""
    return obj.owner_id if isinstance(obj, Workflow) else obj.workflow.owner_id


class WorkflowOwnerOrModelPermission(OwnerOrModelPermission):
    """scheduler_core.rest.permissions.OwnerOrModelPermission for workflows and their
    runs: reading passes (the queryset hides what the user may not view); acting on another owner's
    workflow or workflow run needs the change permission of its model (403 naming it)."""

    owner = staticmethod(owner_of)


def visible_workflows(request):
    """The workflows ``request.user`` may see: their own, or every owner's with
    workflows.view_workflow (or change_workflow)."""
    workflows = services.list_workflows()
    return workflows if may_view_all(request.user, Workflow) else workflows.filter(
        owner=request.user)


class WorkflowRunCursor(CheckedCursor):
    """Newest scheduled first (workflow runs grow without bound: cursor pages)."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500
    ordering = ("-scheduled_at", "-id")


class WorkflowRunFilter(filters.FilterSet):
    """``workflow`` (an id) and ``state`` (may repeat) of GET /api/workflow-runs/."""

    workflow = filters.NumberFilter(field_name="workflow_id")
    state = filters.MultipleChoiceFilter(choices=WorkflowRunState.choices)

    class Meta:
        model = WorkflowRun
        fields = ["workflow", "state"]


@extend_schema_view(
    list=extend_schema(summary="List your workflows",
                       responses={200: WorkflowSummarySerializer(many=True), **LISTED}),
    retrieve=extend_schema(summary="One workflow with its nodes and edges",
                           responses={200: WorkflowSerializer, **COMMON}),
    create=extend_schema(
        summary="Create a workflow (its whole graph) in one request, all or nothing",
        request=WorkflowCreateSerializer, parameters=[IDEMPOTENCY],
        responses={201: WorkflowSerializer, 400: FIELD_ERRORS, 413: DetailSerializer,
                   422: DetailSerializer, **COMMON},
        examples=[OpenApiExample("a chain on a schedule", request_only=True, value=EXAMPLE)]),
)
class WorkflowViewSet(ApiPolicy, ReplicaList, mixins.CreateModelMixin, mixins.ListModelMixin,
                      mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """/api/workflows/: create, list, retrieve, pause, resume, trigger. A workflow's runs
    are at /api/workflows/{id}/runs/ (WorkflowRunViewSet)."""

    serializer_class = WorkflowSerializer
    pagination_class = JobPagination
    filter_backends = [KnownParameters, DjangoFilterBackend]
    filterset_fields = ["status"]
    lookup_value_regex = r"\d+"
    permission_classes = [IsAuthenticatedOrThrottled, WorkflowOwnerOrModelPermission]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user
            return Workflow.objects.none()
        workflows = visible_workflows(self.request)
        if self.action != "list":
            workflows = workflows.prefetch_related("nodes__job", "edges")
        return workflows

    def get_serializer_class(self):
        return {"list": WorkflowSummarySerializer, "create": WorkflowCreateSerializer}.get(
            self.action, WorkflowSerializer)

    def _shown(self, workflow_id: int) -> Response:
        return Response(WorkflowSerializer(self.get_queryset().get(pk=workflow_id)).data)

    def create(self, request, *args, **kwargs):
        return idempotent(request, lambda: self._create(request))

    def _create(self, request) -> Response:
        incoming = WorkflowCreateSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        try:
            workflow = services.create_workflow(data["name"], data["nodes"], data["edges"],
                                                owner=request.user,
                                                schedule=data["schedule"],
                                                allow_tasks=False)
        except InvalidJob as exc:
            raise ValidationError(api_errors(exc.errors)) from exc
        except QuotaExceeded as exc:
            raise QuotaRefused(exc) from exc
        shown = WorkflowSerializer(self.get_queryset().prefetch_related(
            "nodes__job", "edges").get(pk=workflow.pk)).data
        return Response(shown, status=status.HTTP_201_CREATED,
                        headers={"Location": f"/api/workflows/{workflow.pk}/"})

    @extend_schema(summary="Cancel a workflow for good: no run starts on it again, its live "
                           "workflow runs and its node jobs are cancelled (history stays)",
                   request=None, responses={200: WorkflowSerializer, **COMMON})
    def destroy(self, request, pk=None):
        workflow = self.get_object()
        control.cancel_workflow(workflow.pk)  # again on a cancelled one: nothing to do
        return self._shown(workflow.pk)

    @extend_schema(summary="Pause a workflow's schedule: no run starts on it (runs already "
                           "started go on); a trigger is refused",
                   request=None, responses={200: WorkflowSerializer, 409: DetailSerializer,
                                            **COMMON})
    @action(detail=True, methods=["post"])
    def pause(self, request, pk=None):
        workflow = self.get_object()
        if not control.pause_workflow(workflow.pk):
            raise Conflict(f"workflow {workflow.pk} is {workflow.status}; only an active "
                           "workflow can be paused")
        return self._shown(workflow.pk)

    @extend_schema(summary="Resume a paused workflow: its schedule goes on from the first "
                           "occurrence after now",
                   request=None, responses={200: WorkflowSerializer, 409: DetailSerializer,
                                            **COMMON})
    @action(detail=True, methods=["post"])
    def resume(self, request, pk=None):
        workflow = self.get_object()
        try:
            resumed = control.resume_workflow(workflow.pk)
        except InvalidJob as exc:  # a stored schedule that no longer reads: edit it
            raise ValidationError(api_errors(exc.errors)) from exc
        if not resumed:
            raise Conflict(f"workflow {workflow.pk} is {workflow.status}; only a paused "
                           "workflow can be resumed")
        return self._shown(workflow.pk)

    @extend_schema(
        summary="Start a workflow run now (or at scheduled_at; idempotent with a run_key)",
        request=StartSerializer,
        responses={201: WorkflowRunDetailSerializer, 200: WorkflowRunDetailSerializer,
                   400: FIELD_ERRORS, 409: DetailSerializer, **COMMON})
    @action(detail=True, methods=["post"])
    def trigger(self, request, pk=None):
        workflow = self.get_object()
        # No ``or {}``: a body of [], null or false is a 400; an empty body is {} already.
        incoming = StartSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        try:
            if data:
                run = services.start_workflow_run(workflow.pk, run_key=data.get("run_key"),
                                                  scheduled_at=data.get("scheduled_at"))
            else:
                run = services.trigger(workflow.pk)
        except InvalidJob as exc:
            raise ValidationError(api_errors(exc.errors)) from exc
        except QuotaExceeded as exc:
            raise QuotaRefused(exc) from exc
        except SchedulerError as exc:
            raise Conflict(str(exc)) from exc
        created = getattr(run, "created", True)
        return Response(WorkflowRunDetailSerializer(services.get_workflow_run(run.pk)).data,
                        status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
                        headers={"Location": f"/api/workflow-runs/{run.pk}/"})


@extend_schema_view(
    list=extend_schema(summary="List workflow runs (filter by workflow and state)",
                       responses={200: WorkflowRunSerializer(many=True), **LISTED}),
    retrieve=extend_schema(
        summary="One workflow run with every node's state, run, attempts and timing",
        responses={200: WorkflowRunDetailSerializer, **COMMON}),
)
class WorkflowRunViewSet(ApiPolicy, ReplicaList, mixins.ListModelMixin, mixins.RetrieveModelMixin,
                         viewsets.GenericViewSet):
    """/api/workflow-runs/ and /api/workflows/{workflow_pk}/runs/: workflow runs; one with
    its nodes; cancel, pause and resume one."""

    serializer_class = WorkflowRunSerializer
    pagination_class = WorkflowRunCursor
    filter_backends = [KnownParameters, DjangoFilterBackend]
    filterset_class = WorkflowRunFilter
    lookup_value_regex = r"\d+"
    permission_classes = [IsAuthenticatedOrThrottled, WorkflowOwnerOrModelPermission]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return WorkflowRun.objects.none()
        runs = services.list_workflow_runs().select_related("workflow")
        if not may_view_all(self.request.user, WorkflowRun):
            runs = runs.filter(workflow__owner=self.request.user)
        if "workflow_pk" in self.kwargs:
            runs = runs.filter(workflow=get_object_or_404(visible_workflows(self.request),
                                                          pk=self.kwargs["workflow_pk"]))
        return runs

    def retrieve(self, request, *args, **kwargs):
        return self._shown(self.get_object().pk)

    def _shown(self, workflow_run_id: int) -> Response:
        return Response(WorkflowRunDetailSerializer(
            services.get_workflow_run(workflow_run_id)).data)

    def _act(self, verb: str, change, allowed: str) -> Response:
        workflow_run = self.get_object()
        if not change(workflow_run.pk):
            state = WorkflowRun.objects.filter(pk=workflow_run.pk).values_list(
                "state", flat=True).first()
            raise Conflict(f"workflow run {workflow_run.pk} is {state}; only {allowed} "
                           f"workflow runs can be {verb}")
        return self._shown(workflow_run.pk)

    @extend_schema(summary="Cancel a workflow run: pending nodes never run, live node runs "
                           "are cancelled",
                   request=None, responses={200: WorkflowRunDetailSerializer,
                                            409: DetailSerializer, **COMMON})
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        return self._act("cancelled", control.cancel_workflow_run, "running or paused")

    @extend_schema(summary="Pause a workflow run: it starts no new node (its live runs finish)",
                   request=None, responses={200: WorkflowRunDetailSerializer,
                                            409: DetailSerializer, **COMMON})
    @action(detail=True, methods=["post"])
    def pause(self, request, pk=None):
        return self._act("paused", control.pause_workflow_run, "running")

    @extend_schema(summary="Resume a paused workflow run: the nodes that became ready start",
                   request=None, responses={200: WorkflowRunDetailSerializer,
                                            409: DetailSerializer, **COMMON})
    @action(detail=True, methods=["post"])
    def resume(self, request, pk=None):
        return self._act("resumed", control.resume_workflow_run, "paused")
