"""URL configuration: the admin (with the dashboard), the REST API under /api/, and
health probes."""

from django.contrib import admin
from django.urls import include, path

from jobs.api import healthz, readyz

urlpatterns = [
    path("admin/dashboard/", include("runs.dashboard.urls")),
    path("admin/", admin.site.urls),
    path("api/", include("scheduler_project.api_urls")),
    path("healthz", healthz),
    path("readyz", readyz),
]
