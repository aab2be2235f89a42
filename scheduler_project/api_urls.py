"""Every REST endpoint under /api/ (DRF routers, trailing slashes), the OpenAPI 3 schema
and its Swagger UI, and the session login (/api/auth/login/). /healthz and /readyz live
in scheduler_project/urls.py."""

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.routers import DefaultRouter

from jobs.api import JobViewSet
from jobs.limits_api import LimitsView
from runs.api import DeadLetterViewSet, LogLineViewSet, QueueView, RunViewSet

router = DefaultRouter()
router.register("jobs", JobViewSet, basename="job")
router.register("runs", RunViewSet, basename="run")
router.register("dead-letter", DeadLetterViewSet, basename="dead-letter")

urlpatterns = [
    path("jobs/<int:job_pk>/runs/", RunViewSet.as_view({"get": "list"}), name="job-runs"),
    path("runs/<int:run_pk>/logs/", LogLineViewSet.as_view({"get": "list"}), name="run-logs"),
    path("queues/", QueueView.as_view(), name="queues"),
    path("limits/", LimitsView.as_view(), name="limits"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    # Session login for people using the browsable API or the Swagger UI in a browser.
    path("auth/", include("rest_framework.urls")),
    *router.urls,
]
