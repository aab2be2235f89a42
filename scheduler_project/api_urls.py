"""Every REST endpoint under /api/ (DRF routers, trailing slashes), the OpenAPI 3 schema
and its Swagger UI, and the session login (/api/auth/login/). /healthz and /readyz live
in scheduler_project/urls.py."""

from django.urls import include, path
from rest_framework.routers import DefaultRouter

from jobs.api.alerts import JobAlertsView, OwnerAlertsView
from jobs.api.backfill import JobBackfillViewSet
from jobs.api.jobs import JobViewSet
from jobs.api.limits import LimitsView
from jobs.api.rate_limits import RateLimitsView
from runs.api.views import DeadLetterViewSet, LogLineViewSet, QueueView, RunViewSet
from scheduler_core.rest.view_defaults import ApiPolicy
from scheduler_project.api_docs import DocsView, SchemaView
from workflows.api.backfill import WorkflowBackfillViewSet
from workflows.api.views import WorkflowRunViewSet, WorkflowViewSet


class Router(DefaultRouter):
    """DRF's DefaultRouter whose root view (GET /api/) also lists the endpoints outside
    the router: queues, limits, alerts, the schema and its Swagger UI, so the browsable API
    shows every entry point."""

    EXTRA = {"queues": "queues", "limits": "limits", "alerts": "alerts", "schema": "schema",
             "docs": "swagger-ui"}
    # Logged in, as every endpoint it lists, whatever the project's REST_FRAMEWORK says.
    APIRootView = type("APIRootView", (ApiPolicy, DefaultRouter.APIRootView), {})

    def get_api_root_view(self, api_urls=None):
        list_name = self.routes[0].name
        api_root_dict = {prefix: list_name.format(basename=basename)
                         for prefix, _viewset, basename in self.registry}
        return self.APIRootView.as_view(api_root_dict={**api_root_dict, **self.EXTRA})


router = Router()
router.register("jobs", JobViewSet, basename="job")
router.register("runs", RunViewSet, basename="run")
router.register("dead-letter", DeadLetterViewSet, basename="dead-letter")
router.register("workflows", WorkflowViewSet, basename="workflow")
router.register("workflow-runs", WorkflowRunViewSet, basename="workflow-run")

urlpatterns = [
    path("jobs/<int:job_pk>/runs/", RunViewSet.as_view({"get": "list"}), name="job-runs"),
    path("workflows/<int:workflow_pk>/runs/", WorkflowRunViewSet.as_view({"get": "list"}),
         name="workflow-runs-of"),
    path("jobs/<int:pk>/backfill/", JobBackfillViewSet.as_view({"post": "backfill"}),
         name="job-backfill"),
    path("workflows/<int:pk>/backfill/",
         WorkflowBackfillViewSet.as_view({"post": "backfill"}), name="workflow-backfill"),
    path("runs/<int:run_pk>/logs/", LogLineViewSet.as_view({"get": "list"}), name="run-logs"),
    path("queues/", QueueView.as_view(), name="queues"),
    path("limits/", LimitsView.as_view(), name="limits"),
    path("limits/rates/", RateLimitsView.as_view(), name="rate-limits"),
    path("alerts/", OwnerAlertsView.as_view(), name="alerts"),
    path("jobs/<int:job_pk>/alerts/", JobAlertsView.as_view(), name="job-alerts"),
    path("schema/", SchemaView.as_view(), name="schema"),
    path("docs/", DocsView.as_view(url_name="schema"), name="swagger-ui"),
    # Session login for people using the browsable API or the Swagger UI in a browser.
    path("auth/", include("rest_framework.urls")),
    *router.urls,
]
