"""URL configuration: the admin (with the dashboard), the REST API under /api/, health
probes and the Prometheus endpoint."""

from django.contrib import admin
from django.urls import include, path

from jobs.api import healthz, readyz
from runs.metrics import metrics_view

# settings.INSTALLED_APPS uses SimpleAdminConfig: the admin modules load here, not at start.
admin.autodiscover()

urlpatterns = [
    path("admin/dashboard/", include("runs.dashboard.urls")),
    path("admin/", admin.site.urls),
    path("api/", include("scheduler_project.api_urls")),
    path("healthz", healthz),
    path("readyz", readyz),
    path("metrics", metrics_view, name="metrics"),
]
